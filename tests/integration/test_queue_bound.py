"""The bound on the queue against real PostgreSQL: tiers, nothing dropped, duplicates."""

from __future__ import annotations

import psycopg
import pytest

from mailbus.kernel.errors import QueueFullError
from mailbus_client.enqueue import SendRequest, enqueue
from mailbus_client.policies import QueueCap

CAP = QueueCap(100)  # p2 refused from 60 open rows, p1 from 90, p0 from 100


def _fill(database_url: str, count: int, status: str = "pending", tag: str = "fill") -> None:
    """Plain SQL inserts, which the cap never refuses (only the helper checks it)."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, priority, status)"
            " SELECT %(tag)s || '-' || g, 'bulk@example.com', 'newsletter', 'p2', %(status)s"
            " FROM generate_series(1, %(count)s) g",
            {"tag": f"{tag}-{status}", "status": status, "count": count},
        )
        conn.commit()


def _table(database_url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT id, dedupe_key, status, priority, updated_at FROM email_sends ORDER BY id"
        ).fetchall()


def _try(database_url: str, key: str, priority: str, cap: QueueCap | None = CAP) -> bool:
    """Enqueue one mail and roll it back (the open count stays as filled); True if admitted."""
    with psycopg.connect(database_url) as conn:
        try:
            result = enqueue(
                conn, SendRequest(key, "ana@example.com", "welcome", priority=priority), cap=cap
            )
        except QueueFullError:
            return False
        finally:
            conn.rollback()
    assert result.created
    return True


@pytest.mark.parametrize(
    ("open_rows", "admitted"),
    [(59, {"p0", "p1", "p2"}), (60, {"p0", "p1"}), (90, {"p0"}), (100, set())],
)
def test_lowest_priority_is_refused_first(
    database_url: str, open_rows: int, admitted: set[str]
) -> None:
    _fill(database_url, open_rows)
    before = _table(database_url)
    assert {p for p in ("p0", "p1", "p2") if _try(database_url, f"k-{p}", p)} == admitted
    assert _table(database_url) == before


def test_refusal_names_priority_count_and_threshold_and_writes_nothing(
    database_url: str,
) -> None:
    _fill(database_url, 60)
    before = _table(database_url)
    with psycopg.connect(database_url) as conn:
        with pytest.raises(QueueFullError) as error:
            enqueue(
                conn, SendRequest("news-1", "ana@example.com", "newsletter", priority="p2"), cap=CAP
            )
        conn.commit()
    assert (error.value.priority, error.value.open_rows, error.value.threshold) == ("p2", 60, 60)
    message = str(error.value)
    assert "p2" in message and "60 open rows" in message and "refused from 60" in message
    assert _table(database_url) == before


def test_accepted_rows_commit_and_count(database_url: str) -> None:
    _fill(database_url, 59)
    with psycopg.connect(database_url) as conn:
        first = enqueue(
            conn, SendRequest("n-1", "ana@example.com", "newsletter", priority="p2"), cap=CAP
        )
        conn.commit()
        assert first.created
        with pytest.raises(QueueFullError):  # the 60th open row now counts
            enqueue(
                conn, SendRequest("n-2", "ana@example.com", "newsletter", priority="p2"), cap=CAP
            )
        conn.rollback()


def test_sending_and_unknown_count_terminal_rows_do_not(database_url: str) -> None:
    for status in ("accepted", "failed", "expired", "suppressed"):
        _fill(database_url, 500, status)
    assert _try(database_url, "k-p2", "p2")  # 2,000 terminal rows, 0 open
    _fill(database_url, 30, "sending")
    _fill(database_url, 30, "unknown")
    assert not _try(database_url, "k-p2", "p2")  # 60 open
    assert _try(database_url, "k-p1", "p1")


def test_a_duplicate_key_is_a_no_op_even_when_full(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        original = enqueue(
            conn, SendRequest("news-7", "ana@example.com", "newsletter", priority="p2")
        )
        conn.commit()
    _fill(database_url, 200)
    before = _table(database_url)
    with psycopg.connect(database_url) as conn:
        again = enqueue(
            conn, SendRequest("news-7", "ana@example.com", "newsletter", priority="p2"), cap=CAP
        )
        conn.commit()
    assert (again.send_id, again.created) == (original.send_id, False)
    assert _table(database_url) == before


def test_the_callers_transaction_survives_a_refusal(database_url: str) -> None:
    _fill(database_url, 100)
    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
        conn.commit()
        with conn.transaction():
            conn.execute("INSERT INTO orders VALUES (1)")
            with pytest.raises(QueueFullError):
                enqueue(
                    conn, SendRequest("order-1-c", "ana@example.com", "order_confirmation"), cap=CAP
                )
            conn.execute("INSERT INTO orders VALUES (2)")  # still usable: nothing failed in SQL
        rows = conn.execute("SELECT count(*) FROM orders").fetchone()
    assert rows == (2,)


def test_cap_from_the_environment_by_default(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(database_url, 60)
    assert _try(database_url, "k-p2", "p2", cap=None)  # MAILBUS_QUEUE_CAP unset: unbounded
    monkeypatch.setenv("MAILBUS_QUEUE_CAP", "100")
    assert not _try(database_url, "k-p2", "p2", cap=None)
    assert _try(database_url, "k-p2", "p2", cap=QueueCap())  # an explicit opt-out
    monkeypatch.setenv("MAILBUS_QUEUE_CAP_SHARES", "0.7,0.9,1")
    assert _try(database_url, "k-p2", "p2", cap=None)


def test_the_count_is_an_index_only_scan(database_url: str) -> None:
    _fill(database_url, 20_000, "accepted")
    _fill(database_url, 5_000)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE email_sends")
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN SELECT count(*) FROM email_sends"
                " WHERE status IN ('pending', 'sending', 'unknown')"
            )
        )
    assert "Index Only Scan using email_sends_open_idx" in plan
