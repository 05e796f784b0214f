"""`mailbus retention run` (docs/retention.md) on the real PostgreSQL, as the least-privilege
role mailbus_retention: a settled send past MAILBUS_RETENTION goes with its history, a send
that is not final never does, and inside the window the contract's enqueue
(`INSERT ... ON CONFLICT (dedupe_key) DO NOTHING`) stays idempotent."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg.errors import InsufficientPrivilege, ObjectNotInPrerequisiteState
from services import run_mailbus
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.consumer.retention import TABLES
from mailbus.relay.outbox_metrics import OutboxCollector

pytestmark = pytest.mark.stack

OLD = "now() - interval '91 days'"  # past the default window of 90 days
INSIDE = "now() - interval '89 days'"
ENQUEUE = (  # docs/reference/contract.md#database, as a domain service writes it
    "INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, priority)"
    " VALUES (%s, 'a@x.org', 't', '{}', 'p1') ON CONFLICT (dedupe_key) DO NOTHING"
)


@pytest.fixture
def retention_url(database_url: str) -> Iterator[str]:
    apply_roles(database_url)
    with login_as(database_url, "mailbus_retention") as url:
        yield url


def send(conn: psycopg.Connection, key: str, status: str, updated_at: str, **extra: object) -> int:
    columns = ", ".join(extra)
    values = "".join(", %s" for _ in extra)
    row = conn.execute(
        f"INSERT INTO email_sends (dedupe_key, to_address, template, status, attempts,"
        f" created_at, updated_at{', ' + columns if extra else ''})"
        f" VALUES (%s, 'a@x.org', 't', %s, 1, {updated_at}, {updated_at}{values}) RETURNING id",
        (key, status, *extra.values()),
    ).fetchone()
    assert row is not None
    return int(row[0])


def letter(conn: psycopg.Connection, send_id: int | None, published: bool, at: str) -> int:
    row = conn.execute(
        f"INSERT INTO email_dead_letters (send_id, reason, created_at, published_at)"
        f" VALUES (%s, 'rejected', {at}, {at if published else 'NULL'}) RETURNING id",
        (send_id,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def retention(url: str, *args: str, **env: str) -> str:
    run = run_mailbus("retention", "run", *args, env={"MAILBUS_DATABASE_URL": url, **env})
    assert run.returncode == 0, run.stderr
    return run.stdout


def pin_floors(database_url: str, **env: str) -> str:
    """`retention floors --set` as the operator: the database's floors become the windows."""
    with login_as(database_url, "mailbus_operator") as url:
        run = run_mailbus("retention", "floors", "--set", env={"MAILBUS_DATABASE_URL": url, **env})
    assert run.returncode == 0, run.stderr
    return run.stdout


def keys(database_url: str) -> set[str]:
    with psycopg.connect(database_url) as conn:
        return {key for (key,) in conn.execute("SELECT dedupe_key FROM email_sends")}


def test_settled_mail_past_the_window_goes_with_its_history_and_open_mail_never(
    database_url: str, retention_url: str
) -> None:
    with psycopg.connect(database_url) as conn:
        gone = {
            status: send(conn, f"old-{status}", status, OLD)
            for status in ("accepted", "failed", "expired", "suppressed")
        }
        conn.execute(
            "INSERT INTO email_attempts (send_id, attempt, outcome) VALUES (%s, 1, 'accepted')",
            (gone["accepted"],),
        )
        replayed = letter(conn, gone["failed"], published=True, at=OLD)
        conn.execute(
            "INSERT INTO email_replays (dead_letter_id, send_id, replayed_by, reason)"
            " VALUES (%s, %s, 'op', 'why')",
            (replayed, gone["failed"]),
        )
        conn.execute(
            "INSERT INTO email_send_resolutions (send_id, action, from_status, resolved_by)"
            " VALUES (%s, 'accepted', 'unknown', 'op')",
            (gone["accepted"],),
        )
        for status in ("pending", "sending", "unknown"):  # not final: kept, however old
            send(conn, f"old-{status}", status, OLD)
        send(conn, "recent-accepted", "accepted", INSIDE)
        # its dead letter is not on Kafka yet: the send waits for it
        letter(conn, send(conn, "old-failed-letter-unpublished", "failed", OLD), False, OLD)
        campaign = conn.execute(
            "INSERT INTO campaigns (name, template, state, rate_per_min)"
            " VALUES ('c', 't', 'running', 60) RETURNING id"
        ).fetchone()
        assert campaign is not None
        send(conn, "old-accepted-running-campaign", "accepted", OLD, campaign_id=campaign[0])
        intake_gone = letter(conn, None, published=True, at=OLD)
        intake_kept = letter(conn, None, published=False, at=OLD)
        for event_id, at in (("e-old", OLD), ("e-new", INSIDE)):
            conn.execute(
                f"INSERT INTO delivery_events (provider, event_id, type, message_id,"
                f" occurred_at, matched, received_at)"
                f" VALUES ('sandbox', %s, 'delivered', 'm', {at}, true, {at})",
                (event_id,),
            )

    out = retention(retention_url, "--batch", "2")
    assert "sends 4 deleted, 3 batches" in out  # 2 + 2 + an empty one that ends it
    assert "dead letters 1 deleted" in out and "delivery events 1 deleted" in out

    assert keys(database_url) == {
        "old-pending",
        "old-sending",
        "old-unknown",
        "recent-accepted",
        "old-failed-letter-unpublished",
        "old-accepted-running-campaign",
    }
    with psycopg.connect(database_url) as conn:
        ids = list(gone.values())
        for table in ("email_attempts", "email_dead_letters", "email_send_resolutions"):
            [(n,)] = conn.execute(f"SELECT count(*) FROM {table} WHERE send_id = ANY(%s)", (ids,))
            assert n == 0, table
        assert conn.execute("SELECT count(*) FROM email_replays").fetchone() == (0,)
        letters = {i for (i,) in conn.execute("SELECT id FROM email_dead_letters")}
        assert intake_kept in letters and intake_gone not in letters
        events = {e for (e,) in conn.execute("SELECT event_id FROM delivery_events")}
        assert events == {"e-new"}

    again = retention(retention_url)  # idempotent: a second run finds nothing
    assert "sends 0 deleted, 1 batches" in again
    assert len(keys(database_url)) == 6


def test_enqueue_inside_the_window_stays_idempotent(database_url: str, retention_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        send(conn, "order-1-confirmation", "accepted", INSIDE)
        send(conn, "order-2-confirmation", "accepted", OLD)
    retention(retention_url)
    with psycopg.connect(database_url) as conn:
        inside = conn.execute(ENQUEUE, ("order-1-confirmation",)).rowcount
        past = conn.execute(ENQUEUE, ("order-2-confirmation",)).rowcount
        rows = conn.execute(
            "SELECT dedupe_key, status FROM email_sends ORDER BY dedupe_key"
        ).fetchall()
    assert inside == 0  # inside the window: the duplicate is refused, nothing is sent again
    assert past == 1  # past it the key is forgotten: the window is the dedupe window
    assert rows == [("order-1-confirmation", "accepted"), ("order-2-confirmation", "pending")]


def last_run(database_url: str) -> tuple[bool, int, int]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT complete, deleted, backlog_rows FROM retention_runs ORDER BY id DESC LIMIT 1"
        ).fetchone()
    assert row is not None
    return bool(row[0]), int(row[1]), int(row[2])


def test_a_run_goes_on_until_caught_up_and_says_when_its_budget_ran_out(
    database_url: str, retention_url: str
) -> None:
    with psycopg.connect(database_url) as conn:
        for n in range(5):
            send(conn, f"k{n}", "accepted", OLD)
    dry = retention(retention_url, "--dry-run")
    assert "would delete sends 5, dead letters 0, delivery events 0" in dry
    assert len(keys(database_url)) == 5
    env = {"MAILBUS_DATABASE_URL": retention_url}
    behind = run_mailbus("retention", "run", "--batch", "2", "--budget", "0s", env=env)
    assert behind.returncode == 3, behind.stderr  # spent, still behind: not a success
    assert "sends 2 deleted, 1 batches" in behind.stdout
    assert "still behind: 3 rows past their window" in behind.stdout
    assert last_run(database_url) == (False, 2, 3)  # what the relay's gauge reads
    out = retention(retention_url, "--batch", "2")  # the default budget: until done
    assert "sends 3 deleted, 2 batches" in out and "caught up" in out
    assert keys(database_url) == set()
    assert last_run(database_url) == (True, 3, 0)


def gauges(url: str) -> dict[str, float]:
    collector = OutboxCollector(url)
    try:
        return {
            family.name: family.samples[0].value
            for family in collector.collect()
            if family.name.startswith("mailbus_retention_")
        }
    finally:
        collector.close()


def test_the_relay_exports_how_far_behind_the_last_run_is(
    database_url: str, retention_url: str
) -> None:
    with login_as(database_url, "mailbus_relay") as relay_url:
        before = gauges(relay_url)  # never ran: zeros, so "not caught up for 2 days" fires
        assert before == dict.fromkeys(before, 0.0) and len(before) == 4
        with psycopg.connect(database_url) as conn:
            for n in range(3):
                send(conn, f"k{n}", "accepted", OLD)
        env = {"MAILBUS_DATABASE_URL": retention_url}
        run = run_mailbus("retention", "run", "--batch", "1", "--budget", "0s", env=env)
        assert run.returncode == 3, run.stderr
        behind = gauges(relay_url)
        assert behind["mailbus_retention_backlog_rows"] == 2
        assert behind["mailbus_retention_overdue_seconds"] == pytest.approx(86400, abs=600)
        assert behind["mailbus_retention_last_run_timestamp_seconds"] > 0
        assert behind["mailbus_retention_last_caught_up_timestamp_seconds"] == 0
        retention(retention_url)
        caught_up = gauges(relay_url)
        assert caught_up["mailbus_retention_backlog_rows"] == 0
        assert caught_up["mailbus_retention_last_caught_up_timestamp_seconds"] > 0


def test_bad_input_exits_2_with_one_line_and_deletes_nothing(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        send(conn, "k", "accepted", OLD)
    env = {"MAILBUS_DATABASE_URL": database_url}
    for args, extra, says in (
        (["--batch", "0"], {}, "expected a whole number >= 1"),
        ([], {"MAILBUS_RETENTION": "90m"}, "MAILBUS_RETENTION: must be at least 1d"),
        ([], {"MAILBUS_RETENTION": "ninety"}, "MAILBUS_RETENTION"),
    ):
        run = run_mailbus("retention", "run", *args, env={**env, **extra})
        assert run.returncode == 2, run.stderr
        assert says in run.stderr.strip().splitlines()[-1]  # the line naming what is wrong
    assert keys(database_url) == {"k"}


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MAILBUS_RETENTION": "2d"}, "MAILBUS_INTAKE_MAX_AGE"),  # its default is 3d
        (
            {"MAILBUS_RETENTION": "1d", "MAILBUS_INTAKE_MAX_AGE": "1h",
             "MAILBUS_IDEMPOTENCY_WINDOW": "172800"},
            "MAILBUS_IDEMPOTENCY_WINDOW",
        ),
        (
            {"MAILBUS_RETENTION": "1d", "MAILBUS_INTAKE_MAX_AGE": "1h",
             "MAILBUS_LOOKUP_SETTLE": "172800"},
            "MAILBUS_LOOKUP_SETTLE",
        ),
    ],
)
def test_a_window_shorter_than_a_replay_horizon_is_refused(
    database_url: str, env: dict[str, str], named: str
) -> None:
    with psycopg.connect(database_url) as conn:
        send(conn, "k", "accepted", "now() - interval '3 days'")
    run = run_mailbus("retention", "run", env={"MAILBUS_DATABASE_URL": database_url, **env})
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert "MAILBUS_RETENTION" in last and named in last
    assert keys(database_url) == {"k"}


def test_campaigns_recipients_and_audit_go_by_their_own_windows(
    database_url: str, retention_url: str
) -> None:
    with psycopg.connect(database_url) as conn:
        ids = {}
        for name, state, ended in (
            ("old", "finished", "now() - interval '31 days'"),
            ("cancelled", "cancelled", "now() - interval '31 days'"),
            ("recent", "finished", "now() - interval '29 days'"),
            ("paused", "paused", "NULL"),
        ):
            row = conn.execute(
                f"INSERT INTO campaigns (name, template, rate_per_min, state, ended_at,"
                f" updated_at) VALUES (%s, 't', 60, %s, {ended}, now() - interval '400 days')"
                " RETURNING id",
                (name, state),
            ).fetchone()
            assert row is not None
            ids[name] = row[0]
            conn.execute(
                "INSERT INTO campaign_recipients (campaign_id, ordinal, user_id, email)"
                " SELECT %s, n, 'u' || n, 'u' || n || '@x.org' FROM generate_series(1, 3) n",
                (row[0],),
            )
        # as the owner, past the trigger that stamps `at` with now()
        conn.execute("ALTER TABLE console_audit DISABLE TRIGGER console_audit_append_only")
        conn.execute(
            "INSERT INTO console_audit (at, who, role, action) VALUES"
            " (now() - interval '366 days', 'ana', 'operator', 'old'),"
            " (now() - interval '364 days', 'ana', 'operator', 'kept')"
        )
        conn.execute("ALTER TABLE console_audit ENABLE TRIGGER console_audit_append_only")

    def left() -> tuple[dict[str, int], set[str], list[str]]:
        with psycopg.connect(database_url) as conn:
            recipients = dict(conn.execute(
                "SELECT c.name, count(r.ordinal) FROM campaigns c LEFT JOIN campaign_recipients"
                " r ON r.campaign_id = c.id GROUP BY c.name").fetchall())
            names = {n for (n,) in conn.execute("SELECT name FROM campaigns")}
            audit = [a for (a,) in conn.execute("SELECT action FROM console_audit ORDER BY id")]
        return recipients, names, audit

    out = retention(retention_url)
    assert "campaign recipients 6 deleted" in out and "console audit 1 deleted" in out
    recipients, names, audit = left()
    assert recipients == {"old": 0, "cancelled": 0, "recent": 3, "paused": 3}
    assert names == {"old", "cancelled", "recent", "paused"}  # the rows' window is 365d
    assert audit == ["kept"]
    pin_floors(database_url, MAILBUS_RETENTION_CAMPAIGNS="30d")
    retention(retention_url, MAILBUS_RETENTION_CAMPAIGNS="30d")
    _, names, _ = left()
    assert names == {"recent", "paused"}  # an ended campaign past its window, never a paused one




def test_the_retention_role_deletes_and_nothing_else(database_url: str, retention_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        send(conn, "k", "accepted", OLD)
    for statement, error in (
        ("SELECT to_address FROM email_sends", InsufficientPrivilege),
        ("UPDATE email_sends SET status = 'pending'", InsufficientPrivilege),
        (ENQUEUE.replace("%s", "'x'"), InsufficientPrivilege),
        ("TRUNCATE email_attempts", InsufficientPrivilege),
        ("DELETE FROM email_suppressions", InsufficientPrivilege),
        ("SELECT * FROM email_send_events", InsufficientPrivilege),
        ("DELETE FROM campaign_recipients", InsufficientPrivilege),
        ("SELECT email FROM campaign_recipients", InsufficientPrivilege),
        ("DELETE FROM campaigns", InsufficientPrivilege),
        ("DELETE FROM console_audit", InsufficientPrivilege),
        ("INSERT INTO retention_runs (complete, deleted, backlog_rows, overdue_s)"
         " VALUES (true, 0, 0, 0)", InsufficientPrivilege),
        ("SELECT mailbus_prune_history('console audit', 3600, 10)",
         psycopg.errors.InvalidParameterValue),
    ):
        with psycopg.connect(retention_url) as conn, pytest.raises(error):
            conn.execute(statement)
    with psycopg.connect(retention_url) as conn:  # the UPDATE grant on a view changes nothing
        conn.execute("SELECT set_config('mailbus.retention_s', '7776000', true)")
        with pytest.raises((ObjectNotInPrerequisiteState, psycopg.errors.FeatureNotSupported)):
            conn.execute("UPDATE email_sends_past_retention SET id = 1")


def test_a_leaked_retention_login_cannot_prune_under_the_databases_floors(
    database_url: str, retention_url: str
) -> None:
    # a two-day-old mail (an intake event of it may still be read again: its max age is 3d)
    # and a two-day-old audit row: a one-day window would take both
    with psycopg.connect(database_url) as conn:
        send(conn, "k", "accepted", "now() - interval '2 days'")
        conn.execute("ALTER TABLE console_audit DISABLE TRIGGER console_audit_append_only")
        conn.execute(
            "INSERT INTO console_audit (at, who, role, action)"
            " VALUES (now() - interval '2 days', 'ana', 'operator', 'kept')"
        )
        conn.execute("ALTER TABLE console_audit ENABLE TRIGGER console_audit_append_only")
    with psycopg.connect(retention_url, autocommit=True) as conn:
        for call in (
            "SELECT mailbus_prune('sends', 86400, 100)",
            "SELECT mailbus_prune_history('console audit', 86400, 100)",
        ):
            floor = "must be at least its floor"
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=floor):
                conn.execute(call)
        with pytest.raises(InsufficientPrivilege):  # nor lower the floors first
            conn.execute("UPDATE retention_floors SET floor_s = 86400")
    assert keys(database_url) == {"k"}
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM console_audit").fetchone() == (1,)


def test_the_operator_pins_the_floors_to_the_windows_and_a_run_keeps_to_them(
    database_url: str, retention_url: str
) -> None:
    with psycopg.connect(database_url) as conn:
        send(conn, "k", "accepted", "now() - interval '31 days'")
    short = {"MAILBUS_RETENTION": "30d"}
    refused = run_mailbus(
        "retention", "run", env={"MAILBUS_DATABASE_URL": retention_url, **short}
    )
    assert refused.returncode == 2, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert "MAILBUS_RETENTION" in last and "retention floors --set" in last
    assert keys(database_url) == {"k"}
    assert "sends 30d" in pin_floors(database_url, **short)
    out = retention(retention_url, **short)
    assert "sends 1 deleted" in out
    assert keys(database_url) == set()


def test_the_retention_login_cannot_fake_its_run_report(
    database_url: str, retention_url: str
) -> None:
    with psycopg.connect(database_url) as conn:
        for n in range(3):
            send(conn, f"k{n}", "accepted", OLD)
    with psycopg.connect(retention_url, autocommit=True) as conn:
        for forged in (
            "SELECT mailbus_retention_report(true, 0, 0, 0)",  # the caller's figures: gone
            "SELECT mailbus_retention_record('sends', 90 * 86400, 100, 0)",  # the functions'
        ):
            with pytest.raises((InsufficientPrivilege, psycopg.errors.UndefinedFunction)):
                conn.execute(forged)
        # a window past every row "finishes" each table without deleting: not caught up
        for what, query in TABLES:
            conn.execute(f"SELECT mailbus_{query}(%s, 3650 * 86400, 100)", (what,))
        conn.execute("SELECT mailbus_retention_report()")
    assert last_run(database_url) == (False, 0, 3)  # the database's own count

    def under_the_floors(batch: int, *tables: str) -> None:
        with psycopg.connect(retention_url, autocommit=True) as conn:
            for what in tables:
                conn.execute(
                    f"SELECT mailbus_{dict(TABLES)[what]}(f.what, f.floor_s, %s)"
                    " FROM retention_floors f"
                    " WHERE f.what = %s",
                    (batch, what),
                )

    def report() -> tuple[bool, int, int]:
        with psycopg.connect(retention_url, autocommit=True) as conn:
            conn.execute("SELECT mailbus_retention_report()")
        return last_run(database_url)

    others = [t for t, _ in TABLES if t != "sends"]
    under_the_floors(100, *others)  # nothing there: caught up
    under_the_floors(2, "sends")  # 2 of 3: a full batch, maybe more
    assert report() == (False, 2, 1)
    under_the_floors(100, *others)
    under_the_floors(100, "sends")  # the last one: a short batch, caught up ...
    with psycopg.connect(database_url) as conn:
        send(conn, "k3", "accepted", OLD)
    under_the_floors(1, "sends")  # ... until a full batch: maybe more again
    assert report() == (False, 2, 0)
    under_the_floors(100, *others, "sends")
    assert report() == (True, 0, 0)
