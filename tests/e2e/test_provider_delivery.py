"""Delivery through relay and consumer to named providers' sandbox dialects, and to SES
through the AWS SDK against moto (issue 20).

Each run ends with the table agreeing with the provider. The idempotency-window test gives
the provider a 6 s key window and the consumer a 1 s request timeout and a 2 s margin,
with every first call accepted and then left hanging: a resend inside the window is a
replay of the same mail, a row past it stays ``unknown`` for an operator; no key is
accepted twice. Postmark's search shows a mail only a second after accepting it.
"""

from __future__ import annotations

import pytest
from e2e_stack import Stack
from moto_ses import CREDENTIALS, REGION, MotoSes, ReplySwallower, moto_ses
from relay_runner import wait_until

RESEND = {"MAILBUS_PROVIDER": "resend", "MAILBUS_MAIL_FROM": "shop@example.com"}
# providers with neither an idempotency key nor a look-up (docs/providers.md)
NEITHER = {
    "sendgrid": {"MAILBUS_PROVIDER": "sendgrid", "MAILBUS_MAIL_FROM": "shop@example.com"},
    "mailgun": {
        "MAILBUS_PROVIDER": "mailgun",
        "MAILBUS_MAIL_FROM": "shop@mg.example.com",
        "MAILBUS_MAILGUN_DOMAIN": "mg.example.com",
    },
}
POSTMARK = {"MAILBUS_PROVIDER": "postmark", "MAILBUS_MAIL_FROM": "shop@example.com"}


def _resolve_as_operator(stack: Stack) -> int:
    """What an operator does with rows left ``unknown``: reads the provider's own record
    (here the sandbox's ledger) and settles each row (``mailbus send resolve`` is not on
    this branch: the same guarded update, in SQL)."""
    keys = stack.ledger()["keys"]
    unknown = stack.query("SELECT dedupe_key FROM email_sends WHERE status = 'unknown'")
    for (key,) in unknown:
        held = keys.get(key, {}).get("id")
        stack.query(
            "UPDATE email_sends SET status = CASE WHEN %s::text IS NULL THEN 'failed'"
            " ELSE 'accepted' END, message_id = %s WHERE dedupe_key = %s AND status = 'unknown'"
            " RETURNING id",
            held,
            held,
            key,
        )
    return len(unknown)


def test_resend_delivery_through_faults_ends_with_the_table_agreeing(stack: Stack) -> None:
    stack.set_faults(
        {"kind": "hang_after_accept", "share": 0.15, "hang_seconds": 3},
        {"kind": "503", "share": 0.1},
        {"kind": "429", "share": 0.1, "retry_after": 1},
        {"kind": "malformed", "share": 0.1},
    )
    keys = stack.seed(30, prefix="resend")
    stack.start_relay()
    stack.start_consumer(
        MAILBUS_PROVIDER_URL=stack.sandbox.url, MAILBUS_REQUEST_TIMEOUT="1", **RESEND
    )
    statuses = stack.wait_settled(60)
    assert statuses == {"accepted": len(keys)}  # 24 h window: every doubt resent and replayed
    outcomes = stack.ledger()["totals"]["outcomes"]
    assert outcomes.get("replayed", 0) > 0  # doubt was settled by a resend under the key
    assert stack.query("SELECT DISTINCT guarantee FROM email_sends") == [("exactly_once",)]
    assert stack.accepted_twice() == []
    stack.assert_table_agrees_with_providers()


@pytest.mark.parametrize("backoff_base", ["0.4", "8"])  # resends inside / past the window
def test_no_key_is_accepted_twice_across_a_6s_window(stack: Stack, backoff_base: str) -> None:
    stack.control("idempotency", {"window_s": 6})
    stack.seed(16, prefix="window")
    # a few, so the breaker stays closed and timing alone decides inside / past the window
    stack.set_faults({"kind": "hang_after_accept", "next": 4, "hang_seconds": 3})
    stack.start_relay()
    stack.start_consumer(
        MAILBUS_PROVIDER_URL=stack.sandbox.url,
        MAILBUS_IDEMPOTENCY_WINDOW="6",
        MAILBUS_REQUEST_TIMEOUT="1",
        MAILBUS_CONNECT_TIMEOUT="0.2",
        MAILBUS_KEY_WINDOW_MARGIN="2",  # a resend must start 2 s before the window ends
        MAILBUS_BACKOFF_BASE=backoff_base,
        MAILBUS_BACKOFF_CAP="8",
        **RESEND,
    )

    def at_rest() -> bool:
        open_rows = stack.query(
            "SELECT count(*) FROM email_sends WHERE status IN ('pending', 'sending')"
        )
        return open_rows == [(0,)]

    wait_until(at_rest, 60, "every row accepted or waiting for an operator")
    statuses = stack.statuses()
    assert set(statuses) <= {"accepted", "unknown"}, statuses
    assert stack.accepted_twice() == []  # not one resend landed past the provider's window
    waiting = stack.query("SELECT last_error FROM email_sends WHERE status = 'unknown'")
    assert all("operator" in error for (error,) in waiting), waiting
    assert _resolve_as_operator(stack) == statuses["unknown"]
    stack.assert_table_agrees_with_providers()


@pytest.mark.parametrize("provider", sorted(NEITHER))
def test_at_most_once_delivery_through_faults_ends_with_the_table_agreeing(
    stack: Stack, provider: str
) -> None:
    """SendGrid and Mailgun through the fault mix: 5xx and 429 are retried (nothing was
    accepted), a timeout after acceptance or a malformed 2xx leaves the row ``unknown`` for
    an operator -- never resent, so no mail is sent twice -- and once the operator settled
    those from the provider's record, the table agrees with it."""
    stack.set_faults(
        {"kind": "hang_after_accept", "share": 0.15, "hang_seconds": 3},
        {"kind": "503", "share": 0.1},
        {"kind": "429", "share": 0.1, "retry_after": 1},
        {"kind": "malformed", "share": 0.1},
    )
    keys = stack.seed(24, prefix=provider)
    stack.start_relay()
    stack.start_consumer(
        MAILBUS_PROVIDER_URL=stack.sandbox.url, MAILBUS_REQUEST_TIMEOUT="1", **NEITHER[provider]
    )

    def at_rest() -> bool:
        open_rows = stack.query(
            "SELECT count(*) FROM email_sends WHERE status IN ('pending', 'sending')"
        )
        return open_rows == [(0,)]

    wait_until(at_rest, 60, "every row accepted or waiting for an operator")
    statuses = stack.statuses()
    assert set(statuses) <= {"accepted", "unknown"}, statuses
    assert statuses["unknown"] > 0  # the mix left some in doubt, and nothing resent them
    outcomes = stack.ledger()["totals"]["outcomes"]
    assert outcomes.get("503", 0) + outcomes.get("429", 0) > 0  # retried, then accepted
    assert stack.query("SELECT DISTINCT guarantee FROM email_sends") == [("at_most_once",)]
    assert stack.accepted_twice() == []
    ids = stack.query("SELECT message_id FROM email_sends WHERE status = 'accepted'")
    assert all(not i.startswith("<") for (i,) in ids)  # Mailgun's, as its webhooks match it
    assert _resolve_as_operator(stack) == statuses["unknown"]
    assert stack.statuses() == {"accepted": len(keys)}
    stack.assert_table_agrees_with_providers()


def test_postmark_delivery_through_faults_ends_with_the_table_agreeing(stack: Stack) -> None:
    """Postmark has no key: every doubt is settled by its outbound message search, by the
    metadata the mail carried; a resend happens only after the search found nothing
    once the settle time had passed. The search shows a mail a second after the send."""
    stack.control("search", {"lag_s": 1})
    stack.set_faults(
        {"kind": "hang_after_accept", "share": 0.15, "hang_seconds": 3},
        {"kind": "503", "share": 0.1},
        {"kind": "429", "share": 0.1, "retry_after": 1},
        {"kind": "malformed", "share": 0.1},
        {"kind": "500_after_accept", "share": 0.1},
    )
    keys = stack.seed(30, prefix="postmark")
    stack.start_relay()
    stack.start_consumer(
        MAILBUS_PROVIDER_URL=stack.sandbox.url, MAILBUS_REQUEST_TIMEOUT="1", **POSTMARK
    )
    statuses = stack.wait_settled(60)
    assert statuses == {"accepted": len(keys)}
    totals = stack.ledger()["totals"]
    assert totals["lookups"] > 0 and totals["outcomes"].get("found", 0) > 0  # doubt looked up
    assert totals["outcomes"].get("replayed", 0) == 0  # no key to replay under
    assert stack.query("SELECT DISTINCT guarantee FROM email_sends") == [("exactly_once",)]
    assert stack.accepted_twice() == []
    stack.assert_table_agrees_with_providers()


def _ses_env(url: str) -> dict[str, str]:
    return {
        "MAILBUS_PROVIDER": "ses",
        "MAILBUS_MAIL_FROM": "shop@example.com",
        "MAILBUS_SES_REGION": REGION,
        "MAILBUS_SES_ENDPOINT_URL": url,
        "MAILBUS_SES_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
        "MAILBUS_SES_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
    }


def _moto_record(ses: MotoSes) -> dict[str, list[str]]:
    return {m["id"]: m["destinations"]["ToAddresses"] for m in ses.sent()}


def test_ses_delivery_through_the_sdk_ends_with_the_table_agreeing_with_moto(
    stack: Stack,
) -> None:
    """SES through the real AWS SDK against moto's server mode: every row accepted under
    ``at_most_once`` (SES has neither key nor look-up), each with the MessageId moto holds
    for that recipient, and moto holding no mail the table does not."""
    with moto_ses() as ses:
        ses.verify("shop@example.com")
        keys = stack.seed(20, prefix="ses")
        stack.start_relay()
        stack.start_consumer(**_ses_env(ses.url))
        assert stack.wait_settled(60) == {"accepted": len(keys)}
        held = _moto_record(ses)
    rows = stack.query("SELECT to_address, message_id, guarantee FROM email_sends")
    assert {guarantee for _, _, guarantee in rows} == {"at_most_once"}
    table = {message_id: [to] for to, message_id, _ in rows}
    assert table == held  # the table agrees with the provider: same mails, same ids


def test_ses_timeout_after_acceptance_stays_unknown_and_is_never_resent(stack: Stack) -> None:
    """SES accepts the first 3 calls but their replies never arrive: at most once, those
    rows stay ``unknown`` for an operator and are never sent again; SES holds each of them
    once, and every other row agrees with it."""
    with moto_ses() as ses:
        ses.verify("shop@example.com")
        proxy = ReplySwallower(int(ses.url.rsplit(":", 1)[1]), count=3)
        keys = stack.seed(12, prefix="ses-doubt")
        stack.start_relay()
        stack.start_consumer(
            MAILBUS_REQUEST_TIMEOUT="1", MAILBUS_MAX_IN_FLIGHT="2", **_ses_env(proxy.url)
        )

        def at_rest() -> bool:
            return stack.query(
                "SELECT count(*) FROM email_sends WHERE status NOT IN ('accepted', 'unknown')"
            ) == [(0,)]

        wait_until(at_rest, 60, "every row accepted or waiting for an operator")
        stack.terminate("consumer")
        held = _moto_record(ses)
        proxy.close()
    assert stack.statuses() == {"accepted": len(keys) - 3, "unknown": 3}
    rows = stack.query("SELECT to_address, status, message_id, attempts FROM email_sends")
    accepted = {message_id: [to] for to, status, message_id, _ in rows if status == "accepted"}
    in_doubt = sorted(to for to, status, _, attempts in rows if status == "unknown")
    assert all(attempts == 1 for _, status, _, attempts in rows if status == "unknown")
    assert len(held) == len(keys)  # SES took every mail once, the 3 in doubt too
    assert {k: v for k, v in held.items() if k in accepted} == accepted
    assert sorted(to for k, [to] in held.items() if k not in accepted) == in_doubt
