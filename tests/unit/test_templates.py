"""Local templates (consumer/templates.py): rendered from a directory with Jinja2, html
autoescaped, strict about variables, sandboxed, each template read once; problems are
values naming the template and the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from mailbus.consumer.templates import Rendered, TemplateProblem, TemplateStore


def _template(root: Path, name: str, subject: str, text: str, html: str | None = None) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "subject.txt").write_text(subject)
    (folder / "text.txt").write_text(text)
    if html is not None:
        (folder / "html.html").write_text(html)


@pytest.fixture
def store(tmp_path: Path) -> TemplateStore:
    _template(
        tmp_path,
        "order_confirmation",
        "Order {{ order_id }} confirmed\n",
        "Hello {{ name }}, order {{ order_id }} is on its way.\n",
        "<p>Hello {{ name }}</p>",
    )
    _template(tmp_path, "plain", "Hi", "Just {{ what }}")
    return TemplateStore(tmp_path)


def test_renders_subject_text_and_html(store: TemplateStore) -> None:
    result = store.render("order_confirmation", {"order_id": "A-7", "name": "Ada"})
    assert result == Rendered(
        "Order A-7 confirmed",
        "Hello Ada, order A-7 is on its way.",
        "<p>Hello Ada</p>",
    )


def test_html_is_autoescaped_text_and_subject_are_not(store: TemplateStore) -> None:
    result = store.render("order_confirmation", {"order_id": "<1>", "name": "<b>Bob</b> & co"})
    assert isinstance(result, Rendered)
    assert result.html == "<p>Hello &lt;b&gt;Bob&lt;/b&gt; &amp; co</p>"
    assert result.text.startswith("Hello <b>Bob</b> & co")
    assert result.subject == "Order <1> confirmed"


def test_html_is_optional(store: TemplateStore) -> None:
    assert store.render("plain", {"what": "text"}) == Rendered("Hi", "Just text", None)


def test_a_missing_variable_names_template_and_variable(store: TemplateStore) -> None:
    result = store.render("order_confirmation", {"name": "Ada"})
    assert result == TemplateProblem("template_variable_missing", "order_confirmation.order_id")
    assert str(result) == "template_variable_missing: order_confirmation.order_id"


def test_a_missing_attribute_is_a_missing_variable_too(tmp_path: Path) -> None:
    _template(tmp_path, "nested", "x", "{{ order.total }}")
    result = TemplateStore(tmp_path).render("nested", {"order": {"id": 1}})
    assert result == TemplateProblem("template_variable_missing", "nested.total")


@pytest.mark.parametrize("name", ["nope", "../order_confirmation", "a/b", ".hidden", ""])
def test_a_missing_template_is_named(store: TemplateStore, name: str) -> None:
    assert store.render(name, {}) == TemplateProblem("template_missing", name)


@pytest.mark.parametrize(
    "trick",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ x.__class__.__subclasses__() }}",
        "{{ x.__init__.__globals__ }}",
        "{{ x.items.__self__ }}",
        "{{ ''.format.__self__.__class__ }}",
        "{{ x.clear() }}",  # variables cannot be changed either (the mail's headers...)
        "{{ y.append(1) }}",
    ],
)
def test_the_sandbox_refuses_attribute_tricks(tmp_path: Path, trick: str) -> None:
    _template(tmp_path, "evil", "s", trick)
    variables = {"x": {"a": 1}, "y": [1]}
    result = TemplateStore(tmp_path).render("evil", variables)
    assert isinstance(result, TemplateProblem)
    assert (result.kind, result.subject) == ("template_unsafe", "evil")
    assert variables == {"x": {"a": 1}, "y": [1]}


def test_a_template_error_is_a_value(tmp_path: Path) -> None:
    _template(tmp_path, "broken", "s", "{% if %}")
    _template(tmp_path, "divides", "s", "{{ 1 // n }}")
    store = TemplateStore(tmp_path)
    broken = store.render("broken", {})
    assert isinstance(broken, TemplateProblem) and broken.kind == "template_error"
    divides = store.render("divides", {"n": 0})
    assert isinstance(divides, TemplateProblem) and divides.kind == "template_error"
    assert "ZeroDivisionError" in divides.detail


def test_a_subject_of_two_lines_is_refused(tmp_path: Path) -> None:
    _template(tmp_path, "split", "{{ a }}", "t")
    result = TemplateStore(tmp_path).render("split", {"a": "x\nBcc: y@example.com"})
    assert isinstance(result, TemplateProblem) and result.kind == "template_error"


def test_each_template_is_read_once(tmp_path: Path) -> None:
    _template(tmp_path, "once", "v1 {{ n }}", "t")
    store = TemplateStore(tmp_path)
    assert store.render("once", {"n": 1}) == Rendered("v1 1", "t", None)
    (tmp_path / "once" / "subject.txt").write_text("v2 {{ n }}")
    (tmp_path / "once" / "text.txt").unlink()
    assert store.render("once", {"n": 2}) == Rendered("v1 2", "t", None)  # the cached one
    assert store.render("later", {}) == TemplateProblem("template_missing", "later")
    _template(tmp_path, "later", "now", "here")
    # a miss is remembered too: nothing is read per mail (a restart picks new templates up)
    assert store.render("later", {}) == TemplateProblem("template_missing", "later")
    assert TemplateStore(tmp_path).render("later", {}) == Rendered("now", "here", None)
