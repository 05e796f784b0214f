"""Local templates: a mail's subject, text and html rendered from ``MAILBUS_TEMPLATES_DIR``
(docs/providers.md#templates), as values.

The directory holds one folder per template, named as the rows' ``template``::

    order_confirmation/subject.txt   the subject (one line once rendered)
    order_confirmation/text.txt      the plain-text body
    order_confirmation/html.html     the html body (optional), autoescaped

rendered with Jinja2 in a sandbox (:class:`~jinja2.sandbox.ImmutableSandboxedEnvironment`:
the variables come from domain services, and a template may neither reach Python internals
through them nor change them, e.g. the mail's ``headers``) with
``StrictUndefined`` (a variable the template uses and the mail lacks is an error, never an
empty string). Each template is read and compiled once per process, when a mail first
needs it; a missing one is remembered as missing too, so nothing is read from disk per
mail (a changed or added template takes a restart of the consumer).

:meth:`TemplateStore.render` returns :class:`Rendered` or a :class:`TemplateProblem`
naming the template and, for a missing variable, the variable
(``template_variable_missing: order_confirmation.order_id``); it never raises for a
template's fault.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import (
    FileSystemLoader,
    StrictUndefined,
    Template,
    TemplateError,
    TemplateNotFound,
    UndefinedError,
    select_autoescape,
)
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["PARTS", "ProviderTemplate", "Rendered", "TemplateProblem", "TemplateStore"]

PARTS = ("subject.txt", "text.txt", "html.html")  # html.html optional
_EXCERPT_CHARS = 200


@dataclass(frozen=True)
class Rendered:
    """A mail's content rendered locally."""

    subject: str
    text: str
    html: str | None


@dataclass(frozen=True)
class ProviderTemplate:
    """A mail sent by reference to a template kept at the provider (``template_id``: an SES
    template name, a Postmark alias, a SendGrid dynamic template id), with the mail's
    variables as its data."""

    template_id: str


@dataclass(frozen=True)
class TemplateProblem:
    """Why a mail cannot be rendered: ``kind`` is ``template_missing``,
    ``template_variable_missing``, ``template_unsafe`` or ``template_error``; ``subject``
    names the template (``order_confirmation``) or the template and the variable
    (``order_confirmation.order_id``)."""

    kind: str
    subject: str
    detail: str = ""

    def __str__(self) -> str:
        text = f"{self.kind}: {self.subject}"
        return f"{text} ({self.detail})" if self.detail else text


# jinja2's UndefinedError messages: "'order_id' is undefined", "'dict object' has no
# attribute 'total'", "'list object' has no element 3"
_MISSING = re.compile(r"^'(.+)' is undefined$|has no (?:attribute|element) '?(.+?)'?$")


def _missing_name(exc: UndefinedError) -> str:
    found = _MISSING.search(str(exc))
    return next(g for g in found.groups() if g) if found else str(exc)


@dataclass(frozen=True)
class _Compiled:
    subject: Template
    text: Template
    html: Template | None


class TemplateStore:
    """The templates of ``directory``, compiled on first use and kept."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._env = ImmutableSandboxedEnvironment(
            loader=FileSystemLoader(self.directory),
            undefined=StrictUndefined,
            autoescape=select_autoescape(enabled_extensions=("html",), default=False),
            auto_reload=False,
        )
        self._cache: dict[str, _Compiled | TemplateProblem] = {}

    def render(self, name: str, variables: Mapping[str, Any]) -> Rendered | TemplateProblem:
        """The template ``name`` rendered with ``variables``, or the problem that stops it."""
        compiled = self._cache.get(name)
        if compiled is None:
            compiled = self._cache[name] = self._compile(name)
        if isinstance(compiled, TemplateProblem):
            return compiled
        try:
            subject = compiled.subject.render(variables).strip()
            text = compiled.text.render(variables)
            html = compiled.html.render(variables) if compiled.html is not None else None
        except UndefinedError as exc:
            return TemplateProblem("template_variable_missing", f"{name}.{_missing_name(exc)}")
        except SecurityError as exc:
            return TemplateProblem("template_unsafe", name, _excerpt(exc))
        except Exception as exc:  # a template is code: any fault of it is a value
            return TemplateProblem("template_error", name, _excerpt(exc))
        if "\r" in subject or "\n" in subject:
            return TemplateProblem("template_error", name, "the subject spans more than one line")
        return Rendered(subject, text, html)

    def _compile(self, name: str) -> _Compiled | TemplateProblem:
        """Read and compile the template's parts once; a name that is not one folder of the
        directory (a path, a dot-name) is missing."""
        if not name or name.startswith(".") or "/" in name or "\\" in name:
            return TemplateProblem("template_missing", name)
        try:
            subject = self._env.get_template(f"{name}/{PARTS[0]}")
            text = self._env.get_template(f"{name}/{PARTS[1]}")
        except TemplateNotFound:
            return TemplateProblem("template_missing", name)
        except (TemplateError, OSError, UnicodeError) as exc:
            return TemplateProblem("template_error", name, _excerpt(exc))
        try:
            html: Template | None = self._env.get_template(f"{name}/{PARTS[2]}")
        except TemplateNotFound:
            html = None
        except (TemplateError, OSError, UnicodeError) as exc:
            return TemplateProblem("template_error", name, _excerpt(exc))
        return _Compiled(subject, text, html)


def _excerpt(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:_EXCERPT_CHARS]
