"""A mail's content decided before it is encoded (consumer/content.py): a provider's own
template by reference (SES, Postmark, SendGrid, in their documented request shapes), a
local template rendered, or today's rendering; and MAILBUS_PROVIDER_TEMPLATES parsed
strictly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.validate import validate_parameters

from mailbus.consumer.content import TemplatedProvider
from mailbus.consumer.core.capability import Capability
from mailbus.consumer.provider import HttpProvider, MailbusDialect, OutgoingMail
from mailbus.consumer.runner import _process_provider
from mailbus.consumer.templates import ProviderTemplate, Rendered, TemplateStore
from mailbus.kernel.errors import ConfigError, InvalidSendError
from mailbus.kernel.settings import load_settings, parse_provider_templates
from mailbus.providers.mailgun.sending import MailgunDialect
from mailbus.providers.postmark.sending import PostmarkDialect
from mailbus.providers.registry import senders
from mailbus.providers.resend.sending import ResendDialect
from mailbus.providers.sendgrid.sending import SendGridDialect
from mailbus.providers.ses.sending import SesProvider
from mailbus.providers.smtp.sending import SmtpProvider

REPO = Path(__file__).resolve().parents[2]
VARIABLES = {"order_id": "A-7", "headers": {"X-Campaign": "c1"}}
MAIL = OutgoingMail("k-1", "ada@example.com", "order_confirmation", VARIABLES)
REFERENCE = OutgoingMail(
    "k-1", "ada@example.com", "order_confirmation", VARIABLES, ProviderTemplate("tpl-1")
)
RENDERED = OutgoingMail(
    "k-1",
    "ada@example.com",
    "order_confirmation",
    VARIABLES,
    Rendered("Order A-7", "text A-7", "<p>A-7</p>"),
)


def _body(dialect: Any, mail: OutgoingMail) -> tuple[str, dict[str, Any]]:
    wire = dialect.encode(mail)
    return wire.path, json.loads(wire.body)


def test_postmark_sends_a_mapped_template_by_alias_with_the_variables() -> None:
    path, body = _body(PostmarkDialect("shop@example.com"), REFERENCE)
    assert path == "email/withTemplate"
    assert body["TemplateAlias"] == "tpl-1"
    assert body["TemplateModel"] == {"order_id": "A-7"}  # headers travel as headers
    assert body["Headers"] == [{"Name": "X-Campaign", "Value": "c1"}]
    assert body["Metadata"] == {"mailbus_key": "k-1"}  # still found by the look-up
    assert not {"Subject", "TextBody", "HtmlBody"} & body.keys()


def test_sendgrid_sends_a_mapped_template_by_id_with_dynamic_data() -> None:
    path, body = _body(SendGridDialect("shop@example.com"), REFERENCE)
    assert path == "v3/mail/send"
    assert body["template_id"] == "tpl-1"
    assert body["personalizations"] == [
        {"to": [{"email": "ada@example.com"}], "dynamic_template_data": {"order_id": "A-7"}}
    ]
    assert body["custom_args"] == {"dedupe_key": "k-1"}
    assert not {"subject", "content"} & body.keys()


def _ses() -> SesProvider:
    return SesProvider(
        "shop@example.com", region="eu-west-1", access_key_id="a", secret_access_key="b"
    )


def test_ses_sends_a_mapped_template_in_the_shape_the_sdk_validates() -> None:
    arguments = _ses().prepare(REFERENCE).arguments
    assert arguments["Content"] == {
        "Template": {
            "TemplateName": "tpl-1",
            "TemplateData": json.dumps({"order_id": "A-7"}),
            "Headers": [{"Name": "X-Campaign", "Value": "c1"}],
        }
    }
    model = botocore.session.get_session().get_service_model("sesv2")
    validate_parameters(arguments, model.operation_model("SendEmail").input_shape)  # no raise


@pytest.mark.parametrize(
    "dialect",
    [
        MailbusDialect(),
        ResendDialect("shop@example.com"),
        PostmarkDialect("shop@example.com"),
        SendGridDialect("shop@example.com"),
        MailgunDialect("shop@example.com", "mg.example.com"),
    ],
)
def test_every_http_dialect_sends_a_local_rendering(dialect: Any) -> None:
    raw = dialect.encode(RENDERED).body.decode()
    assert "Order A-7" in raw and "text A-7" in raw and "<p>A-7</p>" in raw


def test_smtp_and_ses_send_a_local_rendering() -> None:
    smtp = SmtpProvider("smtp://127.0.0.1:2525", "shop@example.com")
    message = smtp.prepare(RENDERED).message.decode()
    assert "Subject: Order A-7" in message and "text A-7" in message and "<p>A-7</p>" in message
    simple = _ses().prepare(RENDERED).arguments["Content"]["Simple"]
    assert simple["Subject"]["Data"] == "Order A-7"
    assert simple["Body"]["Html"]["Data"] == "<p>A-7</p>"


@pytest.mark.parametrize(
    "dialect", [MailbusDialect(), ResendDialect("a@example.com"), MailgunDialect("a@b.c", "d")]
)
def test_a_provider_without_templates_refuses_a_reference(dialect: Any) -> None:
    with pytest.raises(InvalidSendError) as error:
        dialect.encode(REFERENCE)
    assert error.value.field == "template"


class _Recorder:
    capability = Capability(source="test")

    def __init__(self) -> None:
        self.prepared: list[OutgoingMail] = []

    def prepare(self, mail: OutgoingMail) -> OutgoingMail:
        self.prepared.append(mail)
        return mail

    async def send(self, mail: Any) -> Any:
        raise AssertionError("not called here")

    async def lookup(self, dedupe_key: str) -> Any:
        raise AssertionError("not called here")

    async def aclose(self) -> None:
        return None


@pytest.fixture
def store(tmp_path: Path) -> TemplateStore:
    folder = tmp_path / "order_confirmation"
    folder.mkdir()
    (folder / "subject.txt").write_text("Order {{ order_id }}")
    (folder / "text.txt").write_text("text {{ order_id }}")
    return TemplateStore(tmp_path)


def test_a_mapped_template_goes_by_reference_before_the_local_one(store: TemplateStore) -> None:
    inner = _Recorder()
    TemplatedProvider(inner, store, {"order_confirmation": "tpl-1"}).prepare(MAIL)
    assert inner.prepared[0].content == ProviderTemplate("tpl-1")


def test_an_unmapped_template_is_rendered_locally(store: TemplateStore) -> None:
    inner = _Recorder()
    TemplatedProvider(inner, store, {"other": "tpl-9"}).prepare(MAIL)
    assert inner.prepared[0].content == Rendered("Order A-7", "text A-7", None)


def test_without_a_directory_today_s_content_stays() -> None:
    inner = _Recorder()
    TemplatedProvider(inner, None, {"other": "tpl-9"}).prepare(MAIL)
    assert inner.prepared[0].content is None


@pytest.mark.parametrize(
    ("mail", "problem"),
    [
        (
            OutgoingMail("k", "a@example.com", "order_confirmation", {}),
            "template_variable_missing: order_confirmation.order_id",
        ),
        (
            OutgoingMail("k", "a@example.com", "password_reset", {}),
            "template_missing: password_reset",
        ),
    ],
)
def test_a_missing_template_or_variable_stops_before_the_provider(
    store: TemplateStore, mail: OutgoingMail, problem: str
) -> None:
    inner = _Recorder()
    with pytest.raises(InvalidSendError) as error:
        TemplatedProvider(inner, store).prepare(mail)
    assert (error.value.field, error.value.problem) == ("template", problem)
    assert inner.prepared == []  # never encoded, never sent


def test_the_wrapper_keeps_the_provider_s_capability() -> None:
    http = HttpProvider("http://127.0.0.1:1", "k", 1.0, 2.0, 1)
    assert TemplatedProvider(http, None).capability is http.capability


def test_provider_templates_parse() -> None:
    assert parse_provider_templates(" order_confirmation=d-abc123 , password_reset=reset-v2") == (
        ("order_confirmation", "d-abc123"),
        ("password_reset", "reset-v2"),
    )
    assert parse_provider_templates("") == ()


@pytest.mark.parametrize(
    "raw",
    ["order_confirmation", "=x", "a=", "a=b,a=c", "a b=c", "a=b=c", "a=b,,c=d"],
)
def test_malformed_provider_templates_are_refused(raw: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_provider_templates(raw)
    assert error.value.setting == "MAILBUS_PROVIDER_TEMPLATES"


def test_provider_templates_need_a_provider_that_keeps_templates(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({"MAILBUS_PROVIDER_TEMPLATES": "a=b"})  # http
    assert "postmark" in str(error.value)
    settings = load_settings(
        {
            "MAILBUS_PROVIDER": "sendgrid",
            "MAILBUS_MAIL_FROM": "shop@example.com",
            "MAILBUS_PROVIDER_TEMPLATES": "a=d-1",
            "MAILBUS_TEMPLATES_DIR": str(tmp_path),
        }
    )
    assert (settings.provider_templates, settings.templates_dir) == ((("a", "d-1"),), str(tmp_path))
    with pytest.raises(ConfigError) as missing:
        load_settings({"MAILBUS_TEMPLATES_DIR": str(tmp_path / "nope")})
    assert missing.value.setting == "MAILBUS_TEMPLATES_DIR"


def test_a_malformed_mapping_exits_2_with_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILBUS_")}
    env.update(
        MAILBUS_PROVIDER="postmark",
        MAILBUS_MAIL_FROM="shop@example.com",
        MAILBUS_PROVIDER_TEMPLATES="order_confirmation",
        PYTHONPATH=str(REPO / "client"),  # as installed, also from a worktree
    )
    run = subprocess.run(
        [sys.executable, "-m", "mailbus", "consume"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "mailbus: configuration error: MAILBUS_PROVIDER_TEMPLATES: expected"
        " template=provider_template, got 'order_confirmation'"
    ]


def test_the_consumer_wires_templates_only_when_configured(tmp_path: Path) -> None:
    """No template setting: the provider itself, content as before; a directory: every
    provider of the process renders; a mapping: the primary provider sends by reference."""
    _name, plain, _url = _process_provider(load_settings({}), ["p1"], senders())
    assert isinstance(plain, HttpProvider)
    env = {
        "MAILBUS_PROVIDER": "postmark",
        "MAILBUS_MAIL_FROM": "shop@example.com",
        "MAILBUS_PROVIDER_TEMPLATES": "order_confirmation=order-v2",
        "MAILBUS_TEMPLATES_DIR": str(tmp_path),
    }
    _name, templated, _url = _process_provider(load_settings(env), ["p1"], senders())
    assert isinstance(templated, TemplatedProvider)
    assert templated.content(MAIL) == ProviderTemplate("order-v2")
    with pytest.raises(InvalidSendError, match="template_missing: password_reset"):
        templated.content(OutgoingMail("k", "a@example.com", "password_reset", {}))
