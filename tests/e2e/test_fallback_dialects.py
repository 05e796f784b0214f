"""A fallback of another dialect (issue 34, item 8): the default provider (the sandbox's
own API) loses our key with three mails in doubt, and fallback-policy mail goes to SES
(through the real AWS SDK against moto) meanwhile. The mails in doubt wait for their own
provider's look-up, however long the fallback is at hand; the table ends agreeing with both
providers, and no key is accepted by two (docs/providers.md#the-fallback-provider)."""

from __future__ import annotations

import time

from e2e_stack import API_KEY, Stack
from moto_ses import CREDENTIALS, REGION, MotoSes, moto_ses
from relay_runner import wait_until


def fallback_env(ses: MotoSes) -> dict[str, str]:
    return {
        "MAILBUS_FALLBACK_PROVIDER": "ses",
        "MAILBUS_MAIL_FROM": "shop@example.com",
        "MAILBUS_SES_REGION": REGION,
        "MAILBUS_SES_ENDPOINT_URL": ses.url,
        "MAILBUS_SES_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
        "MAILBUS_SES_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
        "MAILBUS_MAX_ATTEMPTS": "50",
    }


def held_by_ses(ses: MotoSes) -> dict[str, str]:
    """key -> SES MessageId of every mail moto accepted (each seeded key has its own
    recipient, ``<key>@example.com``); a recipient sent twice fails here."""
    held: dict[str, str] = {}
    for message in ses.sent():
        (address,) = message["destinations"]["ToAddresses"]
        key = address.split("@", 1)[0]
        assert key not in held, f"{key} sent twice through SES"
        held[key] = message["id"]
    return held


def statuses_of(stack: Stack, prefix: str) -> list[tuple[str, str | None]]:
    return stack.query(
        "SELECT status, provider FROM email_sends WHERE dedupe_key LIKE %s ORDER BY id",
        f"{prefix}-%",
    )


def test_mail_in_doubt_at_the_primary_never_goes_to_a_fallback_of_another_dialect(
    stack: Stack,
) -> None:
    with moto_ses() as ses:
        ses.verify("shop@example.com")
        stack.start_relay()
        stack.start_consumer(**fallback_env(ses))
        stack.seed(1, prefix="warm-up")
        wait_until(lambda: stack.statuses()["accepted"] == 1, 60, "the warm-up mail")

        # Three alerts reach the primary, which accepts them and never answers; our key is
        # revoked before their look-ups, so their doubt cannot be settled for now.
        stack.set_faults({"kind": "hang_after_accept", "next": 3, "hang_seconds": 30})
        stack.seed(3, prefix="alert-in-doubt", template="internal_alert")
        wait_until(
            lambda: sum(1 for k in stack.ledger()["keys"] if k.startswith("alert-in-doubt")) == 3,
            30,
            "the alerts at the primary",
        )
        stack.control("account", {"keys": []})
        stack.set_faults()
        # Mail that waits for its provider opens the breaker (401: our account's).
        stack.seed(8, prefix="order", template="order_confirmation")
        wait_until(
            lambda: ("open",) in stack.query("SELECT state FROM provider_health"),
            60,
            "the breaker to open",
        )
        # New alerts go to the fallback; the ones in doubt stay with the primary.
        stack.seed(4, prefix="alert-late", template="internal_alert")
        wait_until(lambda: len(ses.sent()) == 4, 60, "the late alerts at SES")
        time.sleep(3)  # the reconciler looks the doubtful ones up again, and fails
        assert statuses_of(stack, "alert-in-doubt") == [("unknown", None)] * 3
        assert statuses_of(stack, "alert-late") == [("accepted", "fallback:ses")] * 4

        stack.control("account", {"keys": [API_KEY]})  # the key is back
        assert stack.wait_settled(120) == {"accepted": 16}
        assert statuses_of(stack, "alert-in-doubt") == [("accepted", None)] * 3
        held = held_by_ses(ses)
        assert sorted(held) == [f"alert-late-{n}" for n in range(4)]
        stack.assert_table_agrees_with_providers(fallback_held=held)
        sources = stack.query(
            "SELECT DISTINCT guarantee FROM email_sends WHERE provider IS NOT NULL"
        )
        assert sources == [("at_most_once",)]  # SES's own guarantee, not the primary's
