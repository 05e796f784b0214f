"""Each named provider's own delivery events end to end (issue 20): relay and consumer send
through that provider's sandbox dialect (SES: through the AWS SDK to moto), the sandbox
posts the provider's native events for what it accepted -- signed that provider's way, a
share of them twice -- to `mailbus webhooks`, which verifies them with the providers'
libraries. Every accepted row ends with its delivery status, every hard bounce's address
suppressed, every repeated event applied once, and the table agreeing with the provider."""

from __future__ import annotations

import base64
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from e2e_stack import API_KEY, Stack
from moto_ses import CREDENTIALS, REGION, moto_ses
from relay_runner import wait_until
from smtp_server import free_port
from sns_support import CERT_PATH, make_pki, serving_certificate

from mailbus.kernel.settings import Settings
from mailbus.providers.mailgun.sandbox import MailgunSigner
from mailbus.providers.postmark.sandbox import PostmarkSigner
from mailbus.providers.resend.sandbox import ResendSigner
from mailbus.providers.sandbox.events import Signer
from mailbus.providers.sendgrid.sandbox import SendGridSigner
from mailbus.providers.ses.sandbox import SesSigner
from mailbus.sandbox.emitter import EventEmitter, Route
from mailbus.sandbox.outcomes import OutcomePlan
from mailbus.sandbox.server import start_in_thread

ROWS = 12
# seed 5: of 12 accepted, 2 bounce hard, 3 soft, 3 are complained about; 5 events repeated
PLAN = OutcomePlan(
    delay_ms=50, bounce_share=0.4, hard_share=0.6, complaint_share=0.3, duplicate_share=0.3
)
RESEND_SECRET = "whsec_" + base64.b64encode(b"e2e-native-resend-0123456789abcd").decode()
MAILGUN_KEY = "key-e2e-native-mailgun"
POSTMARK_AUTH = ("hooks", "e2e:pass")
TOPIC = "arn:aws:sns:eu-west-1:123456789012:mailbus-ses"
SENDER = {
    "resend": {"MAILBUS_PROVIDER": "resend"},
    "postmark": {"MAILBUS_PROVIDER": "postmark"},
    "sendgrid": {"MAILBUS_PROVIDER": "sendgrid"},
    "mailgun": {"MAILBUS_PROVIDER": "mailgun", "MAILBUS_MAILGUN_DOMAIN": "mg.example.com"},
}


class NativeStack(Stack):
    provider: str
    emitter: EventEmitter


@pytest.fixture(params=sorted([*SENDER, "ses"]))
def native_stack(
    request: pytest.FixtureRequest, settings: Settings, tmp_path: Path
) -> Iterator[NativeStack]:
    """The e2e stack whose sandbox posts every provider's own events to `mailbus webhooks`,
    which takes each provider's route (SES's certificate over https under a pinned CA)."""
    pki = make_pki(tmp_path)
    sendgrid_key = ec.generate_private_key(ec.SECP256R1())
    public = sendgrid_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    listen = f"127.0.0.1:{free_port()}"
    with serving_certificate(pki) as aws:
        signers: dict[str, Signer] = {
            "resend": ResendSigner(RESEND_SECRET),
            "mailgun": MailgunSigner(MAILGUN_KEY),
            "postmark": PostmarkSigner(*POSTMARK_AUTH),
            "sendgrid": SendGridSigner(sendgrid_key),
            "ses": SesSigner(TOPIC, aws + CERT_PATH, pki.signing_key),
        }
        routes = {name: Route(f"http://{listen}/webhooks/{name}", s) for name, s in signers.items()}
        emitter = EventEmitter(None, "", PLAN, seed=5, native=routes)
        sandbox = start_in_thread(port=0, api_key=API_KEY, seed=1, emitter=emitter)
        stack = NativeStack(settings, sandbox, tmp_path)
        stack.provider, stack.emitter = request.param, emitter
        try:
            stack.start(
                "webhooks",
                "webhooks",
                MAILBUS_WEBHOOK_LISTEN=listen,
                MAILBUS_RESEND_WEBHOOK_SECRET=RESEND_SECRET,
                MAILBUS_MAILGUN_WEBHOOK_KEY=MAILGUN_KEY,
                MAILBUS_POSTMARK_WEBHOOK_AUTH=":".join(POSTMARK_AUTH),
                MAILBUS_SENDGRID_WEBHOOK_KEY=base64.b64encode(public).decode(),
                MAILBUS_SES_TOPIC_ARNS=TOPIC,
                MAILBUS_SES_CERT_HOSTS="127.0.0.1",
                MAILBUS_SES_CA_FILE=str(pki.ca_file),
            )
            yield stack
        finally:
            stop_together(stack)
            sandbox.stop()


def stop_together(stack: Stack) -> None:
    """SIGTERM every process at once, then wait for each (a second apiece, not in turn)."""
    for process in stack.processes.values():
        process.send_signal(signal.SIGTERM)
    for process in stack.processes.values():
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
    stack.processes.clear()


def events_applied(stack: NativeStack) -> bool:
    """Every event the sandbox meant to send was sent, and each accepted row has one."""
    counts = stack.control("events")
    unapplied = stack.query(
        "SELECT count(*) FROM email_sends WHERE status = 'accepted' AND delivery_status IS NULL"
    )
    return counts["pending"] == 0 and unapplied == [(0,)]


def send_through_ses(stack: NativeStack) -> dict[str, list[str]]:
    """SES (moto) takes the mail; SES publishes its events through SNS: the sandbox's
    emitter, told what SES accepted. Returns what moto holds: {message id: [to]}."""
    with moto_ses() as ses:
        ses.verify("shop@example.com")
        stack.start_consumer(
            MAILBUS_PROVIDER="ses",
            MAILBUS_MAIL_FROM="shop@example.com",
            MAILBUS_SES_REGION=REGION,
            MAILBUS_SES_ENDPOINT_URL=ses.url,
            MAILBUS_SES_ACCESS_KEY_ID=CREDENTIALS["aws_access_key_id"],
            MAILBUS_SES_SECRET_ACCESS_KEY=CREDENTIALS["aws_secret_access_key"],
        )
        assert stack.wait_settled(60) == {"accepted": ROWS}
        held = {m["id"]: m["destinations"]["ToAddresses"] for m in ses.sent()}

    def published(_: object) -> None:
        for message_id, [to] in held.items():
            stack.emitter.accepted(message_id, to, "ses")

    stack.sandbox.call(published)  # on the sandbox's loop, as its own acceptances are
    return held


def test_native_events_reach_delivery_status_and_suppressions_once(
    native_stack: NativeStack,
) -> None:
    stack, provider = native_stack, native_stack.provider
    stack.seed(ROWS, prefix=provider)
    stack.start_relay()
    if provider == "ses":
        held = send_through_ses(stack)
    else:
        env = {"MAILBUS_MAIL_FROM": "shop@mg.example.com", **SENDER[provider]}
        stack.start_consumer(MAILBUS_PROVIDER_URL=stack.sandbox.url, **env)
        assert stack.wait_settled(60) == {"accepted": ROWS}
    wait_until(lambda: events_applied(stack), 30, "every delivery event applied")

    counts = stack.control("events")
    assert (counts["refused"], counts["failed"]) == (0, 0), counts  # every one verified
    assert counts["duplicate"] > 0  # repeats came, and were recognised
    events = stack.query("SELECT provider, type, bounce, matched FROM delivery_events")
    assert len(events) == counts["sent"]  # each event stored once, repeats not again
    assert {row[0] for row in events} == {provider} and all(row[3] for row in events)
    kinds = {(kind, bounce) for _, kind, bounce, _ in events}
    assert {("delivered", None), ("bounced", "hard"), ("complained", None)} <= kinds

    hard = stack.query(
        "SELECT DISTINCT lower(s.to_address), s.delivery_status FROM email_sends s"
        " JOIN delivery_events e ON e.message_id = s.message_id WHERE e.bounce = 'hard'"
    )
    assert hard and all(status == "bounced" for _, status in hard)
    suppressed = stack.query(
        "SELECT address, source FROM email_suppressions WHERE reason = 'hard_bounce'"
    )
    assert sorted(suppressed) == sorted((a, f"webhook:{provider}") for a, _ in hard)

    if provider == "ses":
        rows = stack.query("SELECT message_id, to_address FROM email_sends")
        assert {message_id: [to] for message_id, to in rows} == held  # the table agrees
    else:
        stack.assert_table_agrees_with_providers()
