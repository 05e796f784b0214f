"""The intake runs on whatever an event holds (issue 18): under its own role, past events
too large to republish or to store, and past an empty order id; each bad event becomes a
dead letter and the events behind it become rows."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest
from test_intake import (
    _STARTUP_S,
    Intake,
    _order,
    _produce,
    _topic,
    _wait_until_committed,
    intake_env,
    start_intake,
)
from transport_security import login_as

from mailbus.migrate import apply_roles
from mailbus.settings import Settings

pytestmark = pytest.mark.stack
__all__ = ["intake_env", "start_intake"]  # fixtures shared with test_intake


def _query(database_url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(sql).fetchall()


def _wait_for(
    database_url: str, sql: str, expected: object, intake: Intake, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while (found := _query(database_url, sql)) != expected:
        assert intake.process.poll() is None, f"intake exited:\n{intake.output()}"
        assert time.monotonic() < deadline, f"{found} != {expected}:\n{intake.output()[-3000:]}"
        time.sleep(0.2)


_KEYS = "SELECT dedupe_key FROM email_sends ORDER BY 1"
_LETTERS = "SELECT reason, original_key FROM email_dead_letters ORDER BY original_offset"


def test_the_intake_under_its_own_role_sets_a_bad_event_aside(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    apply_roles(settings.database_url)
    topic = _topic(intake_env)
    records = [(b"G1", _order("G1", "e1")), (b"J", b"\x00junk"), (b"G2", _order("G2", "e2"))]
    _produce(settings.kafka_bootstrap, topic, records)
    with login_as(settings.database_url, "mailbus_intake") as url:
        intake = start_intake(MAILBUS_DATABASE_URL=url)
        _wait_for(
            settings.database_url,
            _KEYS,
            [("order-G1-confirmation",), ("order-G2-confirmation",)],
            intake,
            _STARTUP_S,
        )
        _wait_until_committed(settings, topic)
        assert intake.stop() == 0, intake.output()
    assert _query(settings.database_url, _LETTERS) == [("intake_undecodable", b"J")]
    assert "permission denied" not in intake.output()


def test_an_empty_order_id_is_refused_with_a_dead_letter(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    topic = _topic(intake_env)
    records = [(b"E", _order("", "e0", email="empty@example.com")), (b"G", _order("G", "e1"))]
    _produce(settings.kafka_bootstrap, topic, records)
    intake = start_intake()
    _wait_for(settings.database_url, _KEYS, [("order-G-confirmation",)], intake, _STARTUP_S)
    _wait_until_committed(settings, topic)
    assert intake.stop() == 0, intake.output()
    assert _query(settings.database_url, _LETTERS) == [("intake_invalid", b"E")]
    [(error,)] = _query(settings.database_url, "SELECT error FROM email_dead_letters")
    assert "order_id" in str(error)
