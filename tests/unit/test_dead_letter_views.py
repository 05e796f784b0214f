"""The pure parts of `mailbus dlq`: option parsing, replay order, tables, progress."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.app.cli import _build_parser
from mailbus.consumer.dead_letter_views import (
    Letter,
    LetterFilter,
    format_table,
    letters_table,
    parse_letter_id,
    parse_since,
    replay_order,
    skip_reason,
)
from mailbus.kernel.durations import parse_rate
from mailbus.kernel.errors import ConfigError

NOW = datetime(2025, 3, 10, 12, 0, 0, tzinfo=UTC)


def letter(id: int, priority: str | None = "p1", age_s: float = 0, **changes: object) -> Letter:
    base = Letter(
        id=id,
        created_at=NOW - timedelta(seconds=age_s),
        priority=priority,
        template="welcome",
        reason="rejected",
        status_code=422,
        attempts=1,
        dedupe_key=f"k-{id}",
        error="422 from provider: invalid recipient",
        send_id=100 + id,
        replayed_at=None,
        send_status="failed",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "ago"),
    [
        ("30m", timedelta(minutes=30)),
        ("2h", timedelta(hours=2)),
        ("7d", timedelta(days=7)),
        ("45s", timedelta(seconds=45)),
        ("1w", timedelta(weeks=1)),
        (" 1.5h ", timedelta(minutes=90)),
    ],
)
def test_since_accepts_relative_ages(text: str, ago: timedelta) -> None:
    assert parse_since(text, NOW) == NOW - ago


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-03-01T08:30:00+00:00", datetime(2025, 3, 1, 8, 30, tzinfo=UTC)),
        ("2025-03-01T08:30:00Z", datetime(2025, 3, 1, 8, 30, tzinfo=UTC)),
        ("2025-03-01T08:30:00", datetime(2025, 3, 1, 8, 30, tzinfo=UTC)),  # naive = UTC
        ("2025-03-01", datetime(2025, 3, 1, tzinfo=UTC)),
        (
            "2025-03-01T10:30:00+02:00",
            datetime(2025, 3, 1, 10, 30, tzinfo=timezone(timedelta(hours=2))),
        ),
    ],
)
def test_since_accepts_iso_8601(text: str, expected: datetime) -> None:
    assert parse_since(text, NOW) == expected


@pytest.mark.parametrize("text", ["bogus", "", "30", "5y", "-2h", "2h ago", "2025-13-01"])
def test_since_rejects_anything_else_naming_the_option(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_since(text, NOW)
    assert caught.value.setting == "--since"
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "per_second"),
    [("60/min", 1.0), ("30/min", 0.5), (" 120 / min ", 2.0), ("5/s", 5.0), ("3600/h", 1.0)],
)
def test_rate_is_replays_per_second(text: str, per_second: float) -> None:
    assert parse_rate(text) == pytest.approx(per_second)


@pytest.mark.parametrize("text", ["0", "0/min", " 0 / s "])
def test_a_zero_rate_means_unpaced(text: str) -> None:
    assert parse_rate(text) is None


def test_replay_is_paced_by_default_and_unpaced_on_request() -> None:
    parser = _build_parser()
    assert parse_rate(parser.parse_args(["dlq", "replay"]).rate) == pytest.approx(5.0)
    assert parser.parse_args(["dlq", "replay", "--no-pace"]).no_pace
    assert parse_rate(parser.parse_args(["dlq", "replay", "--rate", "0"]).rate) is None


@pytest.mark.parametrize("text", ["", "60", "-5/min", "ten/min", "5/day", "/min"])
def test_bad_rates_name_the_option(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_rate(text)
    assert caught.value.setting == "--rate"


@pytest.mark.parametrize("text", ["abc", "0", "-3", "1.5", ""])
def test_letter_id_must_be_a_positive_number(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_letter_id(text)
    assert caught.value.setting == "ID"


def test_filters_split_comma_lists_and_check_priorities() -> None:
    where = LetterFilter.from_options("rejected,max_attempts", "p0, p2", "a", "1h", now=NOW)
    assert where == LetterFilter(
        ["rejected", "max_attempts"], ["p0", "p2"], ["a"], NOW - timedelta(hours=1)
    )
    assert LetterFilter.from_options() == LetterFilter()
    with pytest.raises(ConfigError, match="--priority"):
        LetterFilter.from_options(priority="p3")
    with pytest.raises(ConfigError, match="--reason"):
        LetterFilter.from_options(reason=" , ")


def test_replay_order_is_p0_first_then_oldest_first() -> None:
    letters = [
        letter(1, "p2", age_s=500),
        letter(2, "p1", age_s=10),
        letter(3, "p0", age_s=5),
        letter(4, None, age_s=900),
        letter(5, "p1", age_s=20),
        letter(6, "p0", age_s=50),
    ]
    assert [x.id for x in replay_order(letters)] == [6, 3, 5, 2, 1, 4]


letters_st = st.lists(
    st.builds(
        letter,
        id=st.integers(1, 10_000),
        priority=st.sampled_from(["p0", "p1", "p2", None]),
        age_s=st.integers(0, 1000),
    ),
    max_size=30,
)


@given(letters_st)
def test_replay_order_never_puts_a_lower_priority_first(letters: list[Letter]) -> None:
    ordered = replay_order(letters)
    assert sorted(ordered, key=id) == sorted(letters, key=id)
    ranks = [("p0", "p1", "p2", None).index(x.priority) for x in ordered]
    assert ranks == sorted(ranks)
    for a, b in itertools.pairwise(ordered):
        if a.priority == b.priority:
            assert a.created_at <= b.created_at


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({}, None),
        ({"replayed_at": NOW}, "already replayed"),
        ({"send_id": None, "send_status": None}, "no send row (undecodable message)"),
        ({"send_id": None, "send_status": None, "reason": "intake_invalid"}, None),
        ({"send_status": "accepted"}, "send accepted, not failed"),
        ({"send_status": "pending"}, "send pending, not failed"),
    ],
)
def test_skip_reason_predicts_the_guards(changes: dict[str, object], reason: str | None) -> None:
    assert skip_reason(replace(letter(1), **changes)) == reason  # type: ignore[arg-type]


def test_table_columns_are_as_wide_as_their_widest_cell() -> None:
    table = format_table(("id", "name"), [(1, "a"), (1234, None), (7, "longer name")])
    assert table.splitlines() == [
        "id    name",
        "1     a",
        "1234  -",
        "7     longer name",
    ]


def test_letters_table_shows_every_column_on_one_line_each() -> None:
    long_error = "x" * 200 + "\nsecond line"
    table = letters_table([letter(1), letter(22, "p0", error=long_error, status_code=None)])
    header, first, second = table.splitlines()
    for column in ("id", "created (UTC)", "prio", "template", "reason", "code", "att", "error"):
        assert column in header
    assert first.split()[:4] == ["1", "2025-03-10", "12:00:00", "p1"]
    assert "k-1" in first and "422 from provider: invalid recipient" in first
    assert " - " in second  # no status code
    assert second.endswith("…") and len(second) < 200


