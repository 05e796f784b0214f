"""What a mail's content is, decided before any row is claimed: a provider-side template
by reference, a local template rendered, or today's rendering from the variables
(docs/providers.md#templates).

:class:`TemplatedProvider` wraps any :class:`~mailbus.consumer.adapter.Provider`; its
``prepare`` settles the content and hands the mail on with it
(:attr:`~mailbus.consumer.provider.OutgoingMail.content`):

============================================  ==============================================
the mail's template                           content
============================================  ==============================================
in ``MAILBUS_PROVIDER_TEMPLATES``             :class:`ProviderTemplate` (ses, postmark,
                                              sendgrid only): sent by reference
else, with ``MAILBUS_TEMPLATES_DIR``          :class:`Rendered` from the directory
else                                          None: the variables' ``subject``/``text``/
                                              ``html`` or a plain rendering, as before
============================================  ==============================================

A template the directory lacks, or a variable the template needs and the mail lacks, is
:class:`~mailbus.kernel.errors.InvalidSendError` (field ``template``), so the delivery
service fails the row at once with a dead letter naming it, before any claim or call:
nothing half-rendered is ever sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from mailbus.consumer.adapter import Provider
from mailbus.consumer.core.capability import Capability
from mailbus.consumer.core.smtp_outcome import AnyCallResult
from mailbus.consumer.provider import LookupResult, OutgoingMail
from mailbus.consumer.templates import ProviderTemplate, Rendered, TemplateProblem, TemplateStore
from mailbus.kernel.errors import InvalidSendError

__all__ = ["TemplatedProvider"]


class TemplatedProvider:
    """``inner`` with its mails' content decided by ``store`` (local templates; None: off)
    and ``references`` (template -> the provider's own template)."""

    def __init__(
        self,
        inner: Provider,
        store: TemplateStore | None,
        references: Mapping[str, str] | None = None,
    ) -> None:
        self._inner = inner
        self._store = store
        self._references = dict(references or {})
        self.capability: Capability = inner.capability

    def content(self, mail: OutgoingMail) -> Rendered | ProviderTemplate | None:
        """The mail's content; :class:`InvalidSendError` naming a missing template or
        variable."""
        reference = self._references.get(mail.template)
        if reference is not None:
            return ProviderTemplate(reference)
        if self._store is None:
            return None
        rendered = self._store.render(mail.template, mail.variables)
        if isinstance(rendered, TemplateProblem):
            raise InvalidSendError("template", str(rendered))
        return rendered

    def prepare(self, mail: OutgoingMail) -> Any:
        return self._inner.prepare(replace(mail, content=self.content(mail)))

    async def send(self, mail: Any) -> AnyCallResult:
        if isinstance(mail, OutgoingMail):
            mail = self.prepare(mail)
        return await self._inner.send(mail)

    async def lookup(self, dedupe_key: str) -> LookupResult:
        return await self._inner.lookup(dedupe_key)

    async def aclose(self) -> None:
        await self._inner.aclose()
