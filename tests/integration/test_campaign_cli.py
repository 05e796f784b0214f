"""`mailbus campaign ...` as a user runs it: output, exit codes, a SIGKILLed fan-out, and
`mailbus relay` pacing a started campaign."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest
from relay_runner import wait_until
from services import REPO, run_mailbus, settings_env

from mailbus.campaigns.pacer import PACER_COMPONENT, start_pacer_thread
from mailbus.campaigns.store import transition
from mailbus.kernel import health
from mailbus.kernel.settings import Settings


def write_audience(path: Path, n: int) -> Path:
    with path.open("w") as out:
        out.write("user_id,email,first_name\n")
        for i in range(1, n + 1):
            out.write(f"{i},user{i}@example.com,N{i}\n")
    return path


def campaign_rows(database_url: str, campaign_id: int) -> tuple[int, int]:
    """(rows, distinct keys) of the campaign in email_sends."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT dedupe_key) FROM email_sends WHERE campaign_id = %s",
            (campaign_id,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def create(settings: Settings, audience: Path, *options: str, name: str = "Spring sale") -> int:
    done = run_mailbus(
        "campaign", "create", "--name", name, "--template", "newsletter",
        "--audience", str(audience), *options, env=settings_env(settings),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip().splitlines()[-1])


def test_create_prints_the_id_last_and_reports_bad_lines(
    settings: Settings, tmp_path: Path
) -> None:
    audience = tmp_path / "audience.csv"
    audience.write_text(
        "user_id,email,name\n"
        "1,ana@example.com,Ana\n"
        "2,bad address,Bo\n"
        '3,cy@example.com,"Cy\r\nBcc: x@example.com"\n'
        "1,again@example.com,Dup\n"
        "4,dee@example.com,Dee\n"
    )
    env = settings_env(settings)
    done = run_mailbus(
        "campaign", "create", "--name", "N", "--template", "newsletter",
        "--audience", str(audience), env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    campaign_id = done.stdout.strip().splitlines()[-1]
    assert campaign_id.isdigit()
    assert "2 recipients imported, 3 lines skipped" in done.stdout
    assert f"{audience}: line 3: email 'bad address'" in done.stderr
    assert f"{audience}: line 4: a field contains CR, LF or NUL" in done.stderr
    assert f"{audience}: line 6: user_id '1' repeats line 2" in done.stderr

    status = run_mailbus("campaign", "status", campaign_id, "--json", env=env)
    assert status.returncode == 0, status.stderr
    figures = json.loads(status.stdout)
    assert figures["state"] == "draft" and figures["recipients"] == 2
    assert figures["invalid_lines"] == 3 and figures["counts"]["waiting"] == 2
    listing = run_mailbus("campaign", "list", "--json", env=env)
    assert [c["id"] for c in json.loads(listing.stdout)] == [int(campaign_id)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "line 1: no header row"),
        ("id,email\n1,a@example.com\n", "line 1: the header has no 'user_id' column"),
        ("user_id,address\n1,a@example.com\n", "line 1: the header has no 'email' column"),
    ],
)
def test_a_bad_header_exits_2_and_creates_nothing(
    settings: Settings, tmp_path: Path, content: str, message: str
) -> None:
    audience = tmp_path / "audience.csv"
    audience.write_text(content)
    env = settings_env(settings)
    done = run_mailbus(
        "campaign", "create", "--name", "N", "--template", "newsletter",
        "--audience", str(audience), env=env,
    )  # fmt: skip
    assert done.returncode == 2
    assert message in done.stderr
    assert json.loads(run_mailbus("campaign", "list", "--json", env=env).stdout) == []


def test_bad_options_and_moves(settings: Settings, tmp_path: Path) -> None:
    env = settings_env(settings)
    missing = run_mailbus(
        "campaign", "create", "--name", "N", "--template", "newsletter",
        "--audience", str(tmp_path / "nope.csv"), env=env,
    )  # fmt: skip
    assert missing.returncode == 2 and "--audience: cannot read" in missing.stderr
    for option, value in (("--rate", "fast"), ("--window", "9-5"), ("--priority", "p9")):
        bad = run_mailbus(
            "campaign", "create", "--name", "N", "--template", "newsletter",
            "--audience", "x.csv", option, value, env=env,
        )  # fmt: skip
        assert bad.returncode == 2 and option in bad.stderr
    campaign_id = str(create(settings, write_audience(tmp_path / "a.csv", 3)))
    resume = run_mailbus("campaign", "resume", campaign_id, env=env)
    assert resume.returncode == 3  # refused (docs/reference/cli.md#exit-statuses)
    assert f"campaign {campaign_id} is draft: only a paused campaign" in resume.stderr
    unknown = run_mailbus("campaign", "status", "999", env=env)
    assert unknown.returncode == 3 and "no campaign 999" in unknown.stderr
    cancel = run_mailbus("campaign", "cancel", campaign_id, env=env)
    assert cancel.returncode == 0 and f"campaign {campaign_id} is cancelled" in cancel.stdout
    status = json.loads(run_mailbus("campaign", "status", campaign_id, "--json", env=env).stdout)
    assert status["state"] == "cancelled" and status["counts"]["cancelled"] == 3
    paced = create(
        settings, tmp_path / "a.csv", "--rate", "36000/h", "--window", "22:00-06:30",
        "--daily-cap", "100", "--warmup", "10,20", "--priority", "p1", name="Night sale",
    )  # fmt: skip
    shown = run_mailbus("campaign", "status", str(paced), env=env).stdout
    assert "p1, 600/min, window 22:00-06:30 UTC, daily cap 100, warm-up 10,20" in shown


def test_every_campaign_command_has_help(settings: Settings) -> None:
    env = settings_env(settings)
    for action in ("create", "start", "pause", "resume", "cancel", "status", "list", "run"):
        done = run_mailbus("campaign", action, "--help", env=env)
        assert done.returncode == 0 and "usage: mailbus campaign" in done.stdout


def test_a_sigkilled_fan_out_resumes_without_duplicates_or_gaps(
    settings: Settings, tmp_path: Path
) -> None:
    n = 4000
    campaign_id = create(settings, write_audience(tmp_path / "a.csv", n), "--rate", "500/s")
    env = settings_env(settings)
    run = subprocess.Popen(
        [sys.executable, "-m", "mailbus", "campaign", "run", str(campaign_id)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: campaign_rows(settings.database_url, campaign_id)[0] >= 600, 60, "rows")
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(10)
    rows, keys = campaign_rows(settings.database_url, campaign_id)
    assert rows == keys and rows < n  # killed mid-way
    again = run_mailbus("campaign", "run", str(campaign_id), env=env, timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"campaign {campaign_id} is running: handed out {n} of {n}" in again.stdout
    assert f"mails not yet final: {n}" in again.stdout  # finished once they are
    assert campaign_rows(settings.database_url, campaign_id) == (n, n)
    with psycopg.connect(settings.database_url) as conn:
        keys_found = {
            r[0]
            for r in conn.execute(
                "SELECT dedupe_key FROM email_sends WHERE campaign_id = %s", (campaign_id,)
            )
        }
    assert keys_found == {f"campaign-{campaign_id}-user-{i}" for i in range(1, n + 1)}


def test_the_relay_paces_a_started_campaign(settings: Settings, tmp_path: Path) -> None:
    n = 50
    campaign_id = create(settings, write_audience(tmp_path / "a.csv", n), "--rate", "3000/min")
    env = settings_env(settings, MAILBUS_RELAY_POLL_INTERVAL="0.2")
    relay = subprocess.Popen(
        [sys.executable, "-m", "mailbus", "relay"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        started = run_mailbus("campaign", "start", str(campaign_id), env=env)
        assert started.returncode == 0 and "is running" in started.stdout

        def all_published() -> bool:
            with psycopg.connect(settings.database_url) as conn:
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE published_at IS NOT NULL)"
                    " FROM email_sends WHERE campaign_id = %s",
                    (campaign_id,),
                ).fetchone()
            return row is not None and row[0] == n

        wait_until(all_published, 60, "the relay to create and publish every row")
        assert started.stdout.strip() == f"campaign {campaign_id} is running"
    finally:
        relay.send_signal(signal.SIGTERM)
        _out, err = relay.communicate(timeout=30)
    assert relay.returncode == 0, err
    status = json.loads(
        run_mailbus("campaign", "status", str(campaign_id), "--json", env=env).stdout
    )
    # Handed out; not finished while its mail is not final (no consumer runs here).
    assert status["state"] == "running" and status["counts"]["created"] == n


def drop_pacer_column(database_url: str) -> None:
    """A schema the pacer's queries no longer match (code deployed before its migration,
    or a SQL bug): the database refuses the statement, and a retry cannot change that."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE campaigns DROP COLUMN tokens")


def test_run_fails_when_the_database_refuses_the_pacers_statement(
    settings: Settings, tmp_path: Path
) -> None:
    campaign_id = create(settings, write_audience(tmp_path / "a.csv", 3))
    transition(settings.database_url, campaign_id, "start")
    drop_pacer_column(settings.database_url)
    done = run_mailbus("campaign", "run", str(campaign_id), env=settings_env(settings), timeout=30)
    assert done.returncode == 1, done.stderr
    assert 'mailbus: campaign pacer failed: UndefinedColumn: column "tokens"' in done.stderr


def test_the_relays_pacer_reports_a_refused_statement_and_keeps_the_thread(
    settings: Settings,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(health, "_components", {})  # this process's readiness, for this test
    campaign_id = create(settings, write_audience(tmp_path / "a.csv", 3))
    transition(settings.database_url, campaign_id, "start")
    drop_pacer_column(settings.database_url)
    stop = threading.Event()
    with caplog.at_level(logging.ERROR, logger="mailbus.campaigns"):
        pacer = start_pacer_thread(settings, stop)
        try:

            def not_ready() -> bool:
                _ready, components = health.readiness()
                return components.get(PACER_COMPONENT, {}).get("ready") is False

            wait_until(not_ready, 20, "the pacer to mark itself not ready")
            assert pacer.is_alive()  # waits to try again, the relay's other work goes on
        finally:
            stop.set()
            pacer.join(10)
    assert not pacer.is_alive()
    _ready, components = health.readiness()
    assert "UndefinedColumn" in str(components[PACER_COMPONENT]["detail"])
    [record] = [r for r in caplog.records if "campaign pacer stopped" in r.getMessage()]
    assert record.exc_info is not None  # the traceback is in the log


def test_create_killed_mid_import_and_run_again_gives_the_same_campaign(
    settings: Settings, tmp_path: Path
) -> None:
    n = 20_000
    audience = write_audience(tmp_path / "a.csv", n)
    env = settings_env(settings, MAILBUS_CAMPAIGN_IMPORT_PART="20")
    args = ("campaign", "create", "--name", "Spring sale", "--template", "newsletter",
            "--rate", "100000/s")  # fmt: skip
    first = subprocess.Popen(
        [sys.executable, "-m", "mailbus", *args, "--audience", str(audience), "--start"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: imported_through(settings) >= 300, 60, "some parts imported")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    assert imported_through(settings) <= n  # killed mid-import (line 1 is the header)
    again = run_mailbus(*args, "--audience", str(audience), "--start", env=env)
    assert again.returncode == 0, again.stderr
    assert f"{n} recipients imported" in again.stdout
    with psycopg.connect(settings.database_url) as conn:
        [(campaigns, campaign_id)] = conn.execute("SELECT count(*), max(id) FROM campaigns")
    assert (campaigns, int(again.stdout.strip().splitlines()[-1])) == (1, campaign_id)
    ran = run_mailbus("campaign", "run", str(campaign_id), "--no-progress", env=env, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert campaign_rows(settings.database_url, campaign_id) == (n, n)  # each line once
    other = run_mailbus(*args, "--audience", str(write_audience(tmp_path / "b.csv", 5)), env=env)
    assert other.returncode == 3
    assert f"campaign {campaign_id} is already named 'Spring sale'" in other.stderr


def imported_through(settings: Settings) -> int:
    with psycopg.connect(settings.database_url) as conn:
        row = conn.execute("SELECT coalesce(sum(imported_through), 0) FROM campaigns").fetchone()
    assert row is not None
    return int(row[0])


def test_create_import_moves_and_run_say_what_they_did_as_json(
    settings: Settings, tmp_path: Path
) -> None:
    """docs/reference/cli.md#json-documents: one document on stdout each, the skipped lines
    in it (stderr stays empty); a refused move as the JSON error object, exit 3."""
    env = settings_env(settings)
    audience = tmp_path / "audience.csv"
    audience.write_text("user_id,email\n1,ana@example.com\n2,bad address\n3,cy@example.com\n")

    def document(*args: str) -> dict[str, object]:
        done = run_mailbus("campaign", *args, "--json", env=env)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        parsed: dict[str, object] = json.loads(done.stdout)
        return parsed

    created = document("create", "--name", "J", "--template", "newsletter",
                       "--audience", str(audience))  # fmt: skip
    campaign_id = created["campaign_id"]
    assert isinstance(campaign_id, int)
    assert created == {
        "campaign_id": campaign_id, "recipients": 2, "rejected": 1, "completed": True,
        "started": False,
        "rejected_lines": [
            {"line": 3, "problem": "email 'bad address': is not a valid email address"}
        ],
    }  # fmt: skip
    for refused_args, why in (
        (["import", str(campaign_id), "--audience", str(audience)], "import is not open"),
        (["resume", str(campaign_id)], "is draft: only a paused campaign"),
    ):
        refused = run_mailbus("campaign", *refused_args, "--json", env=env)
        assert (refused.returncode, refused.stdout) == (3, "")
        error = json.loads(refused.stderr)["error"]
        assert (error["kind"], error["exit"]) == ("refused", 3)
        assert why in error["message"]

    assert document("start", str(campaign_id)) == {
        "campaign_id": campaign_id, "action": "start", "state": "running",
        "message": f"campaign {campaign_id} is running", "rows": None,
    }  # fmt: skip
    paused = document("pause", str(campaign_id))
    assert (paused["action"], paused["state"], paused["rows"]) == ("pause", "paused", 0)
    assert document("resume", str(campaign_id))["state"] == "running"
    ran = document("run", str(campaign_id))
    assert ran == {
        "campaign_id": campaign_id, "state": ran["state"], "handed_out": 2, "recipients": 2,
        "not_final": 2,
    }  # fmt: skip
    assert ran["state"] in ("running", "finished")
