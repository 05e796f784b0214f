"""The pointer's first-attempt header, as the relay writes it and the consumer reads it."""

from __future__ import annotations

import pytest

from mailbus.schemas.pointer_headers import (
    FIRST_ATTEMPT,
    first_attempt_header,
    first_attempt_template,
)


def test_what_the_relay_writes_the_consumer_reads() -> None:
    headers = [("traceparent", b"00-..."), first_attempt_header("order.shipped")]
    assert first_attempt_template(headers) == "order.shipped"


@pytest.mark.parametrize(
    ("headers", "template"),
    [
        (None, None),
        ([], None),
        ([("traceparent", b"00-...")], None),  # a relay of an earlier build
        ([(FIRST_ATTEMPT.upper(), b"welcome")], "welcome"),  # names compare case-insensitively
        ({FIRST_ATTEMPT: "welcome"}, "welcome"),  # confluent-kafka may give a mapping
        ([(FIRST_ATTEMPT, b"\xff\xfe")], None),  # not UTF-8: the row is read first
        ([(FIRST_ATTEMPT, b"")], None),
        ([(FIRST_ATTEMPT, None)], None),
        ([(FIRST_ATTEMPT, b"a"), (FIRST_ATTEMPT, b"b")], "a"),  # the first counts
        ([(FIRST_ATTEMPT, b"x" * 101)], None),  # longer than a template may be
        ([(FIRST_ATTEMPT, b"x" * 100_000)], None),
        ([(FIRST_ATTEMPT, b"Welcome Mail")], None),  # not a template's characters
    ],
)
def test_what_a_header_says(headers: object, template: str | None) -> None:
    assert first_attempt_template(headers) == template  # type: ignore[arg-type]
