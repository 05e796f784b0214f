"""Local templates through the real delivery service and ledger (PostgreSQL) to a real SMTP
server (aiosmtpd): a mail arrives rendered; a missing template or variable is ``failed``
with a dead letter naming it, decided before any call (docs/providers.md#templates)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from email import message_from_bytes, policy
from pathlib import Path
from typing import Any

import psycopg
import pytest
from delivery_support import origin_for, service_for
from smtp_server import SmtpRecorder, smtp_server

from mailbus.consumer.content import TemplatedProvider
from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.ledger import SendLedger
from mailbus.consumer.templates import TemplateStore
from mailbus.providers.smtp.sending import SmtpProvider, message_id_for


@pytest.fixture
def templates(tmp_path: Path) -> Path:
    folder = tmp_path / "order_confirmation"
    folder.mkdir()
    (folder / "subject.txt").write_text("Order {{ order_id }} confirmed\n")
    (folder / "text.txt").write_text("Hello {{ name }}, order {{ order_id }} ships today.\n")
    (folder / "html.html").write_text("<p>Hello {{ name }}</p>\n")
    return tmp_path


@pytest.fixture
def server() -> Iterator[tuple[str, SmtpRecorder]]:
    with smtp_server() as running:
        yield running


def _deliver(
    database_url: str, url: str, templates: Path, key: str, template: str, variables: Any
) -> dict[str, Any]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, priority, payload_json)"
            " VALUES (%s, 'ada@example.com', %s, 'p1', %s) RETURNING id",
            (key, template, json.dumps(variables)),
        ).fetchone()
        assert row is not None
        send_id = int(row[0])

    async def scenario() -> None:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        provider = TemplatedProvider(
            SmtpProvider(url, "shop@example.com", request_timeout=5), TemplateStore(templates)
        )
        await ledger.open()
        try:
            service = service_for(ledger, provider, RetryPolicy(3, 0.01, 0.01))  # type: ignore[arg-type]
            await service.handle(origin_for(send_id, key, 0))
        finally:
            await provider.aclose()
            await ledger.close()

    asyncio.run(scenario())
    with psycopg.connect(database_url) as conn:
        status, attempts, error = conn.execute(
            "SELECT status, attempts, last_error FROM email_sends WHERE id = %s", (send_id,)
        ).fetchone()  # type: ignore[misc]
        letters = conn.execute(
            "SELECT reason, error FROM email_dead_letters WHERE send_id = %s", (send_id,)
        ).fetchall()
    return {"status": status, "attempts": attempts, "error": error, "letters": letters}


def test_a_local_template_arrives_rendered(
    database_url: str, server: tuple[str, SmtpRecorder], templates: Path
) -> None:
    url, recorder = server
    variables = {"order_id": "A-7", "name": "<b>Ada</b>"}
    row = _deliver(database_url, url, templates, "order-a7", "order_confirmation", variables)
    assert (row["status"], row["attempts"], row["letters"]) == ("accepted", 1, [])
    raw = recorder.contents[message_id_for("order-a7", "example.com")]
    mail = message_from_bytes(raw, policy=policy.default)
    assert mail["Subject"] == "Order A-7 confirmed"
    text = mail.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    html = mail.get_body(("html",)).get_content()  # type: ignore[union-attr]
    assert text.startswith("Hello <b>Ada</b>, order A-7 ships today.")
    assert html.strip() == "<p>Hello &lt;b&gt;Ada&lt;/b&gt;</p>"  # autoescaped


@pytest.mark.parametrize(
    ("template", "variables", "named"),
    [
        (
            "order_confirmation",
            {"name": "Ada"},
            "template_variable_missing: order_confirmation.order_id",
        ),
        ("password_reset", {"order_id": "A-7"}, "template_missing: password_reset"),
    ],
)
def test_a_missing_variable_or_template_fails_before_any_call(
    database_url: str,
    server: tuple[str, SmtpRecorder],
    templates: Path,
    template: str,
    variables: dict[str, str],
    named: str,
) -> None:
    url, recorder = server
    row = _deliver(database_url, url, templates, "order-a8", template, variables)
    assert (row["status"], row["attempts"]) == ("failed", 0)  # no attempt spent
    assert named in row["error"]
    assert len(row["letters"]) == 1
    reason, error = row["letters"][0]
    assert reason == "invalid" and named in error
    assert not recorder.data_seen and not recorder.messages  # nothing reached the server
