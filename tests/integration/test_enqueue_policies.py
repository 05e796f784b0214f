"""The enqueue helper applies the degradation policies' default expiry (real PostgreSQL)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from mailbus_client.enqueue import SendRequest, enqueue
from mailbus_client.policies import load_policy_book


def _expiry(database_url: str, send_id: int) -> tuple[datetime | None, datetime, datetime]:
    """(expires_at, created_at, the database's clock now) of one row."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT expires_at, created_at, clock_timestamp() FROM email_sends WHERE id = %s",
            (send_id,),
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def _enqueue(database_url: str, request: SendRequest, **options: object) -> int:
    with psycopg.connect(database_url) as conn:
        result = enqueue(conn, request, **options)  # type: ignore[arg-type]
        conn.commit()
    assert result.created
    return result.send_id


def test_password_reset_without_expiry_gets_fifteen_minutes(database_url: str) -> None:
    send_id = _enqueue(
        database_url, SendRequest("reset-1", "ana@example.com", "password_reset", priority="p0")
    )
    expires_at, created_at, db_now = _expiry(database_url, send_id)
    assert expires_at is not None
    # now() of the enqueuing transaction: exactly created_at + 900 s, on the database clock
    assert expires_at - created_at == timedelta(seconds=900)
    assert abs(expires_at - (db_now + timedelta(seconds=900))) < timedelta(seconds=30)


def test_order_confirmation_gets_no_expiry(database_url: str) -> None:
    send_id = _enqueue(
        database_url, SendRequest("order-1-confirmation", "ana@example.com", "order_confirmation")
    )
    assert _expiry(database_url, send_id)[0] is None


def test_explicit_expiry_is_kept(database_url: str) -> None:
    expires = datetime(2031, 5, 1, 12, tzinfo=UTC)
    send_id = _enqueue(
        database_url,
        SendRequest("otp-9", "ana@example.com", "otp", priority="p0", expires_at=expires),
    )
    assert _expiry(database_url, send_id)[0] == expires


def test_a_given_now_is_used(database_url: str) -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    send_id = _enqueue(
        database_url,
        SendRequest("alert-1", "ops@example.com", "internal_alert_disk", priority="p0"),
        now=now,
    )
    assert _expiry(database_url, send_id)[0] == now + timedelta(hours=1)


def test_a_duplicate_keeps_the_first_expiry(database_url: str) -> None:
    request = SendRequest("reset-2", "ana@example.com", "password_reset", priority="p0")
    first = _enqueue(database_url, request, now=datetime(2030, 1, 1, tzinfo=UTC))
    with psycopg.connect(database_url) as conn:
        again = enqueue(conn, request, now=datetime(2030, 6, 1, tzinfo=UTC))
        conn.commit()
    assert (again.send_id, again.created) == (first, False)
    assert _expiry(database_url, first)[0] == datetime(2030, 1, 1, 0, 15, tzinfo=UTC)


@pytest.fixture
def custom_policy_file(tmp_path: Path) -> str:
    path = tmp_path / "policies.json"
    path.write_text(
        json.dumps(
            {
                "policies": [
                    {
                        "name": "orders_go_stale",
                        "match": ["order_*"],
                        "expire_after_s": 120,
                        "when_provider_down": "wait",
                    },
                    {
                        "name": "default",
                        "match": "*",
                        "expire_after_s": None,
                        "when_provider_down": "wait",
                    },
                ]
            }
        )
    )
    return str(path)


def test_policy_file_passed_explicitly(database_url: str, custom_policy_file: str) -> None:
    book = load_policy_book(custom_policy_file)
    order = _enqueue(
        database_url,
        SendRequest("order-2-confirmation", "ana@example.com", "order_confirmation"),
        policies=book,
    )
    reset = _enqueue(
        database_url,
        SendRequest("reset-3", "ana@example.com", "password_reset", priority="p0"),
        policies=book,
    )
    expires_at, created_at, _ = _expiry(database_url, order)
    assert expires_at is not None and expires_at - created_at == timedelta(seconds=120)
    assert _expiry(database_url, reset)[0] is None  # the file replaces the shipped book


def test_policy_file_from_the_environment(
    database_url: str, custom_policy_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAILBUS_POLICY_FILE", custom_policy_file)
    order = _enqueue(
        database_url, SendRequest("order-3-confirmation", "ana@example.com", "order_confirmation")
    )
    expires_at, created_at, _ = _expiry(database_url, order)
    assert expires_at is not None and expires_at - created_at == timedelta(seconds=120)
