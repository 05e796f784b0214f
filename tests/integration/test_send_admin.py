"""`mailbus send show / resolve / cancel KEY` against real PostgreSQL: each change is
guarded by the send's status and audited; a send in any other state is left as it is."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from services import run_mailbus, settings_env

from mailbus.kernel.settings import Settings

pytestmark = pytest.mark.stack


def _seed(settings: Settings, key: str, status: str, attempts: int = 0) -> int:
    with psycopg.connect(settings.database_url) as conn:
        (send_id,) = conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, priority, status,"
            " attempts) VALUES (%s, %s, 'one_time_code', 'p0', %s, %s) RETURNING id",
            (key, f"{key}@example.com", status, attempts),
        ).fetchone()  # type: ignore[misc]
        if attempts:
            conn.execute(
                "INSERT INTO email_attempts (send_id, attempt, outcome, reason)"
                " VALUES (%s, 1, 'unknown', 'read timeout')",
                (send_id,),
            )
    return int(send_id)


def _row(settings: Settings, key: str) -> tuple[Any, ...]:
    with psycopg.connect(settings.database_url) as conn:
        row = conn.execute(
            "SELECT status, message_id, attempts FROM email_sends WHERE dedupe_key = %s", (key,)
        ).fetchone()
    assert row is not None
    return row


def _audit(settings: Settings) -> list[tuple[Any, ...]]:
    with psycopg.connect(settings.database_url) as conn:
        return conn.execute(
            "SELECT s.dedupe_key, r.action, r.from_status, r.message_id, r.resolved_by"
            " FROM email_send_resolutions r JOIN email_sends s ON s.id = r.send_id ORDER BY r.id"
        ).fetchall()


def _send(settings: Settings, *args: str) -> Any:
    return run_mailbus("send", *args, env=settings_env(settings, MAILBUS_OPERATOR="ana"))


def test_resolve_settles_only_unknown_rows_and_audits(settings: Settings) -> None:
    _seed(settings, "code-a", "unknown", attempts=1)
    _seed(settings, "code-b", "unknown", attempts=1)
    _seed(settings, "code-c", "sending", attempts=1)

    done = _send(settings, "resolve", "code-a", "--accepted", "msg-42")
    assert done.returncode == 0, done.stderr
    assert _row(settings, "code-a") == ("accepted", "msg-42", 1)
    done = _send(settings, "resolve", "code-b", "--not-sent")
    assert done.returncode == 0, done.stderr
    assert _row(settings, "code-b") == ("pending", None, 1)  # same key, same row

    again = _send(settings, "resolve", "code-a", "--not-sent")  # accepted now: refused
    assert again.returncode == 3  # refused (docs/reference/cli.md#exit-statuses)
    assert again.stderr.strip().splitlines() == [
        "mailbus: code-a is accepted (attempts 1): not sent needs a send that is unknown;"
        " nothing changed"
    ]
    claimed = _send(settings, "resolve", "code-c", "--accepted", "msg-x")
    assert claimed.returncode == 3
    assert _row(settings, "code-c") == ("sending", None, 1)
    missing = _send(settings, "resolve", "nope", "--not-sent")
    assert missing.returncode == 3 and "no send has the key 'nope'" in missing.stderr
    as_json = _send(settings, "show", "nope", "--json")
    assert (as_json.returncode, as_json.stdout) == (3, "")
    assert json.loads(as_json.stderr)["error"]["kind"] == "refused"
    assert _audit(settings) == [
        ("code-a", "accepted", "unknown", "msg-42", "ana"),
        ("code-b", "not_sent", "unknown", None, "ana"),
    ]


def test_cancel_touches_only_pending_rows_never_tried(settings: Settings) -> None:
    _seed(settings, "code-1", "pending")
    _seed(settings, "code-2", "pending", attempts=1)  # tried: the provider may hold it
    _seed(settings, "code-3", "sending")
    assert _send(settings, "cancel", "code-1").returncode == 0
    assert _row(settings, "code-1")[0] == "expired"
    for key, status in (("code-2", "pending"), ("code-3", "sending")):
        refused = _send(settings, "cancel", key)
        assert refused.returncode == 3
        assert "nothing changed" in refused.stderr
        assert _row(settings, key)[0] == status
    assert _audit(settings) == [("code-1", "cancelled", "pending", None, "ana")]


def test_show_tells_the_row_its_attempts_dead_letters_and_resolutions(
    settings: Settings,
) -> None:
    send_id = _seed(settings, "code-s", "unknown", attempts=1)
    with psycopg.connect(settings.database_url) as conn:
        conn.execute(
            "INSERT INTO delivery_events (provider, event_id, type, message_id, occurred_at,"
            " matched) VALUES ('sandbox', 'ev-1', 'delivered', 'msg-s', now(), true)"
        )
    assert _send(settings, "resolve", "code-s", "--accepted", "msg-s").returncode == 0
    shown = _send(settings, "show", "code-s", "--json")
    assert shown.returncode == 0, shown.stderr
    story = json.loads(shown.stdout)
    assert story["send"]["id"] == send_id
    assert story["send"]["status"] == "accepted"
    assert [a["reason"] for a in story["attempts"]] == ["read timeout"]
    assert [e["event_id"] for e in story["delivery_events"]] == ["ev-1"]
    assert story["dead_letters"] == []
    assert [r["action"] for r in story["resolutions"]] == ["accepted"]
    text = _send(settings, "show", "code-s")
    assert "status: accepted" in text.stdout and "resolutions: 1" in text.stdout


def test_resolve_and_cancel_say_what_they_did_and_refuse_as_json(settings: Settings) -> None:
    """docs/reference/cli.md#json-documents: the change as a document; a refusal as the
    JSON error object on stderr, exit 3, stdout empty."""
    _seed(settings, "code-j", "unknown", attempts=1)
    _seed(settings, "code-k", "pending")
    done = _send(settings, "resolve", "code-j", "--accepted", "msg-j", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"key": "code-j", "action": "accepted", "message_id": "msg-j"}
    done = _send(settings, "cancel", "code-k", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"key": "code-k", "action": "cancelled", "message_id": None}

    refused = _send(settings, "resolve", "code-j", "--not-sent", "--json")  # accepted now
    assert (refused.returncode, refused.stdout) == (3, "")
    error = json.loads(refused.stderr)["error"]
    assert (error["kind"], error["exit"]) == ("refused", 3)
    assert "code-j is accepted" in error["message"]
    assert _row(settings, "code-j") == ("accepted", "msg-j", 1)
