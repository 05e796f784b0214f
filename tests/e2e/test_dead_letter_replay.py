"""`mailbus dlq`: poison rows dead-lettered for real, then listed, shown and replayed.

Replays run as `mailbus dlq` subprocesses against real relay and consumer processes and the
sandbox; every assertion is on the table, the audit and what the sandbox accepted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from e2e_stack import Stack
from services import REPO, run_mailbus

SUMMARY = re.compile(r"^replayed (\d+), skipped (\d+)", re.MULTILINE)


def dlq(stack: Stack, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_mailbus("dlq", *args, env=stack.env(**env))


def replayed(output: str) -> int:
    found = SUMMARY.search(output)
    assert found, output
    return int(found.group(1))


def poison(stack: Stack, per_priority: dict[str, int]) -> list[str]:
    """Rows the sandbox rejects with 422: each ends failed with one dead letter."""
    stack.set_faults({"kind": "422", "share": 1})
    keys = [
        k for p, n in per_priority.items() for k in stack.seed(n, prefix=f"bad-{p}", priority=p)
    ]
    stack.start_relay()
    stack.start_consumer()
    assert stack.wait_settled(45) == {"failed": len(keys)}
    assert stack.query("SELECT count(*) FROM email_dead_letters") == [(len(keys),)]
    return keys


def test_replay_of_100_poison_rows_accepts_each_once_even_run_twice_at_once(
    stack: Stack,
) -> None:
    keys = poison(stack, {"p0": 20, "p1": 40, "p2": 40})
    stack.set_faults()  # the provider accepts everything from now on
    totals = stack.ledger()["totals"]

    dry = dlq(stack, "replay", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would replay 100, would skip 0" in dry.stdout
    order = [line.split()[3] for line in dry.stdout.splitlines()[1:101]]
    assert order == sorted(order) and order[0] == "p0"  # P0 first, then P1, P2
    time.sleep(1.5)  # the relay polls: give a wrongly reset row every chance to be sent
    assert stack.statuses() == {"failed": 100}
    assert stack.query("SELECT count(*) FROM email_dead_letters WHERE replayed_at IS NOT NULL") == [
        (0,)
    ]
    assert stack.query("SELECT count(*) FROM email_replays") == [(0,)]
    assert stack.ledger()["totals"] == totals

    # Two replays at once, paced so that they overlap: each letter is replayed by one.
    command = [sys.executable, "-m", "mailbus", "dlq", "replay", "--why", "test"]
    runs = [
        subprocess.Popen(
            [*command, "--rate", "6000/min"],
            cwd=REPO,
            env=stack.env(MAILBUS_OPERATOR=f"operator-{n}"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in (1, 2)
    ]
    outputs = [run.communicate(timeout=60) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    assert sum(replayed(out) for out, _ in outputs) == 100, outputs
    assert not any("\r" in err for _, err in outputs), outputs  # a bar on a terminal only

    assert stack.wait_settled(45) == {"accepted": 100}
    ledger = stack.ledger()["keys"]
    for key in keys:
        assert ledger[key]["accepted"] == 1, (key, ledger[key])
        assert ledger[key]["requests"] == 2, (key, ledger[key])  # the 422, then one send
    audit = stack.query(
        "SELECT count(*), count(DISTINCT dead_letter_id), count(DISTINCT send_id),"
        " min(reason), max(reason) FROM email_replays"
    )
    assert audit == [(100, 100, 100, "test", "test")]
    by = dict(stack.query("SELECT replayed_by, count(*) FROM email_replays GROUP BY 1"))
    assert set(by) <= {"operator-1", "operator-2"} and sum(by.values()) == 100

    again = dlq(stack, "replay")
    assert again.returncode == 0, again.stderr
    assert replayed(again.stdout) == 0
    assert stack.query("SELECT count(*) FROM email_replays") == [(100,)]

    # Even a dead letter that looks unreplayed never resets a send that was accepted.
    stack.query(
        "UPDATE email_dead_letters SET replayed_at = NULL"
        " WHERE id IN (SELECT id FROM email_dead_letters ORDER BY id LIMIT 5) RETURNING id"
    )
    forced = dlq(stack, "replay")
    assert forced.returncode == 0, forced.stderr
    assert "replayed 0, skipped 5 (send accepted, not failed: 5)" in forced.stdout
    time.sleep(1.5)
    assert stack.statuses() == {"accepted": 100}
    assert stack.query("SELECT count(*) FROM email_replays") == [(100,)]
    assert all(entry["accepted"] == 1 for entry in stack.ledger()["keys"].values())
    stack.assert_table_agrees_with_providers()


def test_a_priority_filter_replays_only_that_priority(stack: Stack) -> None:
    poison(stack, {"p0": 4, "p1": 4, "p2": 4})
    stack.set_faults()
    run = dlq(stack, "replay", "--priority", "p0")
    assert run.returncode == 0, run.stderr
    assert replayed(run.stdout) == 4
    stack.wait_settled(45)
    rows = stack.query("SELECT priority, status, count(*) FROM email_sends GROUP BY 1, 2")
    assert sorted(rows) == [("p0", "accepted", 4), ("p1", "failed", 4), ("p2", "failed", 4)]
    letters = stack.query(
        "SELECT priority, count(replayed_at) FROM email_dead_letters GROUP BY 1 ORDER BY 1"
    )
    assert letters == [("p0", 4), ("p1", 0), ("p2", 0)]
    listed = json.loads(dlq(stack, "list", "--json").stdout)
    assert sorted({x["priority"] for x in listed}) == ["p1", "p2"]
    stack.assert_table_agrees_with_providers()


def test_list_filters_by_reason_and_show_prints_the_attempt_history(stack: Stack) -> None:
    stack.set_faults({"kind": "422", "share": 1})
    stack.seed(3, prefix="rejected", priority="p1")
    stack.start_relay()
    stack.start_consumer(MAILBUS_MAX_ATTEMPTS="1")
    stack.wait_settled(45)
    stack.set_faults({"kind": "503", "share": 1})
    stack.seed(2, prefix="busy", priority="p2")
    assert stack.wait_settled(45) == {"failed": 5}

    rejected = json.loads(dlq(stack, "list", "--json", "--reason", "rejected").stdout)
    assert sorted(x["dedupe_key"] for x in rejected) == [f"rejected-{n}" for n in range(3)]
    assert {(x["reason"], x["status_code"], x["send_status"]) for x in rejected} == {
        ("rejected", 422, "failed")
    }
    gave_up = json.loads(dlq(stack, "list", "--json", "--reason", "max_attempts").stdout)
    assert sorted(x["dedupe_key"] for x in gave_up) == ["busy-0", "busy-1"]
    assert json.loads(dlq(stack, "list", "--json", "--since", "1h", "--limit", "2").stdout)
    assert json.loads(dlq(stack, "list", "--json", "--since", "2999-01-01").stdout) == []

    table = dlq(stack, "list")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split()[:3] == ["id", "created", "(UTC)"]
    assert "5 dead letters not yet replayed" in table.stdout

    letter_id = rejected[0]["id"]
    shown = dlq(stack, "show", str(letter_id))
    assert shown.returncode == 0, shown.stderr
    assert f"dead letter {letter_id}, not replayed" in shown.stdout
    assert "rejected (status 422)" in shown.stdout
    assert stack.settings.topic("p1") in shown.stdout  # the original topic
    history = shown.stdout.split("attempt history:")[1].splitlines()
    assert history[1].split()[0] == "attempt"
    assert history[2].split()[0] == "1" and " failed " in history[2] and " 422 " in history[2]
    story = json.loads(dlq(stack, "show", str(letter_id), "--json").stdout)
    assert [(a["attempt"], a["outcome"], a["status_code"]) for a in story["attempts"]] == [
        (1, "failed", 422)
    ]
    assert story["send"]["status"] == "failed"

    missing = dlq(stack, "show", "999999")
    assert missing.returncode == 3  # refused: no such dead letter
    assert missing.stderr.strip() == "mailbus: no dead letter with id 999999"
    stack.assert_table_agrees_with_providers()


def test_bad_options_exit_2_with_one_line_naming_the_option() -> None:
    env = dict(os.environ)
    for args, option in [
        (["list", "--since", "bogus"], "--since"),
        (["replay", "--since", "bogus"], "--since"),
        (["replay", "--rate", "fast"], "--rate"),
        (["replay", "--priority", "p9"], "--priority"),
        (["show", "abc"], "ID"),
    ]:
        run = run_mailbus("dlq", *args, env=env, timeout=30)
        assert run.returncode == 2, (args, run.stderr)
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and option in lines[0], (args, lines)
        assert run.stdout == ""
