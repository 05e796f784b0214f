"""SES templates through the real delivery service, ledger and AWS SDK against moto's
server: a mapped template goes by reference (``Content.Template``: the template's name and
the variables as ``TemplateData``), an unmapped one is rendered locally and sent as
``Content.Simple``; the table agrees with what moto accepted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import psycopg
import pytest
from delivery_support import origin_for, service_for
from moto_ses import CREDENTIALS, REGION, MotoSes, moto_ses

from mailbus.consumer.content import TemplatedProvider
from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.ledger import SendLedger
from mailbus.consumer.templates import TemplateStore
from mailbus.providers.ses.sending import SesProvider

SENDER = "shop@example.com"


@pytest.fixture(scope="module")
def ses() -> Iterator[MotoSes]:
    with moto_ses(templates=True) as server:
        server.verify(SENDER)
        boto3.client(
            "ses", region_name=REGION, endpoint_url=server.url, **CREDENTIALS
        ).create_template(
            Template={
                "TemplateName": "OrderConfirmation",
                "SubjectPart": "Order {{order_id}}",
                "TextPart": "Order {{order_id}} ships.",
                "HtmlPart": "<p>Order {{order_id}}</p>",
            }
        )
        yield server


def test_mapped_by_reference_unmapped_rendered_locally(
    ses: MotoSes, database_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "password_reset"
    folder.mkdir()
    (folder / "subject.txt").write_text("Reset for {{ name }}")
    (folder / "text.txt").write_text("Hello {{ name }}")
    rows = {
        "order-7": ("order_confirmation", {"order_id": "7", "headers": {"X-Campaign": "c1"}}),
        "reset-7": ("password_reset", {"name": "Ada"}),
    }
    with psycopg.connect(database_url) as conn:
        ids = {
            key: conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, priority, payload_json)"
                " VALUES (%s, 'ana@example.com', %s, 'p1', %s) RETURNING id",
                (key, template, json.dumps(variables)),
            ).fetchone()[0]  # type: ignore[index]
            for key, (template, variables) in rows.items()
        }

    async def scenario() -> None:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        ses_provider = SesProvider(
            SENDER,
            region=REGION,
            endpoint_url=ses.url,
            access_key_id=CREDENTIALS["aws_access_key_id"],
            secret_access_key=CREDENTIALS["aws_secret_access_key"],
            max_connections=2,
        )
        provider = TemplatedProvider(
            ses_provider, TemplateStore(tmp_path), {"order_confirmation": "OrderConfirmation"}
        )
        await ledger.open()
        try:
            service = service_for(ledger, provider, RetryPolicy(3, 0.01, 0.01))  # type: ignore[arg-type]
            for key, send_id in ids.items():
                await service.handle(origin_for(send_id, key, 0))
        finally:
            await provider.aclose()
            await ledger.close()

    asyncio.run(scenario())
    with psycopg.connect(database_url) as conn:
        table = dict(
            conn.execute("SELECT dedupe_key, (status, message_id) FROM email_sends").fetchall()
        )
    assert {key: status for key, (status, _) in table.items()} == {
        "order-7": "accepted",
        "reset-7": "accepted",
    }
    [by_reference] = ses.sent("TemplateMessage")
    assert by_reference["id"] == table["order-7"][1]
    assert by_reference["template"] == "OrderConfirmation"
    assert json.loads(by_reference["template_data"]) == {"order_id": "7"}
    [rendered] = ses.sent()
    assert rendered["id"] == table["reset-7"][1]
    assert (rendered["subject"], rendered["body"]) == ("Reset for Ada", "Hello Ada")
