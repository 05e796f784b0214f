"""Postmark's replies mapped onto the outcome classes, its look-up reply, and the metadata a
mail is filed (and found) under."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from mailbus.consumer.core.outcome import Outcome, classify
from mailbus.consumer.provider import LookupResult, OutgoingMail
from mailbus.providers.postmark.sending import PostmarkDialect, metadata_value

NOW = datetime(2026, 12, 3, tzinfo=UTC)
POSTMARK = PostmarkDialect("shop@example.com")


def _classify(status: int, error_code: int, headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    body = json.dumps({"ErrorCode": error_code, "Message": "m"}).encode()
    return classify(POSTMARK.reply(status, headers or {}, body, NOW))


@pytest.mark.parametrize(
    ("status", "error_code", "outcome", "account"),
    [
        (422, 406, Outcome.REJECTED, False),  # inactive recipient: about this mail
        (422, 300, Outcome.REJECTED, False),  # invalid email request
        (422, 412, Outcome.RETRY, True),  # account pending: our state, not the mail's
        (422, 413, Outcome.RETRY, True),  # account may not send
        (401, 10, Outcome.RETRY, True),  # bad or missing server token
        (429, 429, Outcome.RETRY, False),
        (500, 0, Outcome.RETRY, False),
        (503, 100, Outcome.RETRY, False),  # maintenance
    ],
)
def test_status_and_error_code_give_the_outcome(
    status: int, error_code: int, outcome: Outcome, account: bool
) -> None:
    result = _classify(status, error_code)
    assert result.outcome is outcome
    assert (result.server_stage == "account") is account
    assert f"ErrorCode {error_code}" in result.reason


def test_accepted_carries_the_message_id_and_a_2xx_without_one_is_unknown() -> None:
    ok = b'{"To": "a@b.c", "MessageID": "b7bc2f4a-e38e-4336-af7d-e6c392c2f817", "ErrorCode": 0}'
    accepted = classify(POSTMARK.reply(200, {}, ok, NOW))
    assert (accepted.outcome, accepted.message_id) == (
        Outcome.ACCEPTED,
        "b7bc2f4a-e38e-4336-af7d-e6c392c2f817",
    )
    assert classify(POSTMARK.reply(200, {}, b'{"MessageID": "b7', NOW)).outcome is Outcome.UNKNOWN
    odd = b'{"MessageID": "x", "ErrorCode": 406}'  # an error code on a 200: not an acceptance
    assert classify(POSTMARK.reply(200, {}, odd, NOW)).outcome is Outcome.UNKNOWN


def test_retry_after_is_honoured_when_sent() -> None:
    assert _classify(429, 429, {"Retry-After": "6"}).retry_after_s == 6.0


def test_a_mail_is_filed_under_its_key_and_looked_up_by_it() -> None:
    wire = POSTMARK.encode(
        OutgoingMail("order-7", "ana@example.com", "welcome", {"subject": "Hi", "html": "<p>"})
    )
    body = json.loads(wire.body or b"")
    assert body["Metadata"] == {"mailbus_key": "order-7"}
    assert (body["From"], body["To"], body["Subject"], body["HtmlBody"]) == (
        "shop@example.com",
        "ana@example.com",
        "Hi",
        "<p>",
    )
    assert POSTMARK.auth_headers("tok") == {"X-Postmark-Server-Token": "tok"}
    search = POSTMARK.lookup_request("order-7")
    assert (search.path, search.params) == (
        "messages/outbound",
        {"count": "500", "offset": "0", "metadata_mailbus_key": "order-7"},
    )


def test_a_key_longer_than_a_metadata_value_travels_as_its_digest() -> None:
    long_key = "k" * 81
    value = metadata_value(long_key)
    assert value.startswith("sha256:") and len(value) <= 80
    assert metadata_value("k" * 80) == "k" * 80
    assert POSTMARK.lookup_request(long_key).params == {
        "count": "500",
        "offset": "0",
        "metadata_mailbus_key": value,
    }


def _search(*held: tuple[str, str], total: int | None = None) -> bytes:
    messages = [{"MessageID": i, "Metadata": {"mailbus_key": k}} for k, i in held]
    return json.dumps(
        {"TotalCount": len(held) if total is None else total, "Messages": messages}
    ).encode()


def test_the_search_reply_finds_the_mail_or_says_nothing_was_sent() -> None:
    found = _search(("order-1", "m-1"))
    assert POSTMARK.lookup_reply("order-1", 200, found).message_id == "m-1"
    none = POSTMARK.lookup_reply("order-1", 200, b'{"TotalCount": 0, "Messages": []}')
    assert (none.message_id, none.failed) == (None, False)
    assert POSTMARK.lookup_reply("order-1", 200, b"{}").failed  # says nothing: no verdict
    assert POSTMARK.lookup_reply("order-1", 503, b"down").failed


def test_a_hit_counts_only_if_it_carries_our_key() -> None:
    """Postmark does not document how its metadata filter matches: a search for ``order-1``
    that also returns ``Order-1``, ``order-10`` or a mail without metadata finds none of
    them (review 2026-12-06 #3); among them, ours is found."""
    strangers = _search(("Order-1", "m-a"), ("order-10", "m-b"))
    assert POSTMARK.lookup_reply("order-1", 200, strangers) == LookupResult(None, False)
    bare = b'{"TotalCount": 1, "Messages": [{"MessageID": "m-1", "Metadata": {}}]}'
    assert POSTMARK.lookup_reply("order-1", 200, bare) == LookupResult(None, False)
    mixed = _search(("order-10", "m-b"), ("order-1", "m-1"))
    assert POSTMARK.lookup_reply("order-1", 200, mixed).message_id == "m-1"
    long_key = "k" * 81  # filed under its digest
    digest = _search((metadata_value(long_key), "m-9"))
    assert POSTMARK.lookup_reply(long_key, 200, digest).message_id == "m-9"
    assert POSTMARK.lookup_reply(long_key, 200, _search((long_key[:80], "m-9"))).message_id is None


def test_more_matches_than_returned_and_none_ours_is_no_verdict() -> None:
    """A loose filter may match more mails than one page holds: ours may be beyond it."""
    crowded = _search(("order-10", "m-b"), total=900)
    assert POSTMARK.lookup_reply("order-1", 200, crowded).failed
