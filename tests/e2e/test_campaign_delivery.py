"""A campaign end to end: `mailbus relay` paces it, consumers deliver it, the sandbox
counts what it accepted. Each recipient is accepted once, the suppressed never contacted;
pause stops provider requests for the campaign within seconds; a SIGKILLed relay (and its
pacer) resumes without gaps or repeats."""

from __future__ import annotations

import json
import time
from pathlib import Path

from e2e_stack import Stack
from relay_runner import wait_until
from services import run_mailbus


def queued(stack: Stack, campaign_id: int) -> int:
    [(rows,)] = stack.query(
        "SELECT count(*) FROM email_sends WHERE campaign_id = %s AND status = 'pending'",
        campaign_id,
    )
    return int(rows)


def campaign_requests(stack: Stack, campaign_id: int) -> int:
    prefix = f"campaign-{campaign_id}-user-"
    return sum(
        1
        for record in stack.control("requests")
        if record["kind"] == "send" and record["key"].startswith(prefix)
    )


def status(stack: Stack, campaign_id: int) -> dict[str, object]:
    done = run_mailbus("campaign", "status", str(campaign_id), "--json", env=stack.env())
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_a_paced_campaign_is_accepted_once_per_recipient(stack: Stack, tmp_path: Path) -> None:
    n, suppressed = 200, {7, 21, 64, 99, 150}
    audience = tmp_path / "audience.csv"
    audience.write_text(
        "user_id,email,first_name\n"
        + "".join(f"{i},reader{i}@example.com,R{i}\n" for i in range(1, n + 1))
    )
    with_case = [
        f"READER{i}@Example.com" if i % 2 else f"reader{i}@example.com" for i in suppressed
    ]
    for address in with_case:
        stack.query("INSERT INTO email_suppressions (address) VALUES (%s) RETURNING 1", address)
    env = stack.env()
    created = run_mailbus(
        "campaign", "create", "--name", "e2e", "--template", "newsletter",
        "--audience", str(audience), "--rate", "20/s", env=env,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    campaign_id = int(created.stdout.strip().splitlines()[-1])
    # The consumer is slower (one call at a time, 100 ms each) than the campaign's pace
    # (20/s), so rows queue up: the pause must hold those back too.
    stack.set_faults(latency_ms=100)
    stack.start_relay()
    stack.start_consumer(priorities="p2", MAILBUS_MAX_IN_FLIGHT="1")
    assert run_mailbus("campaign", "start", str(campaign_id), env=env).returncode == 0

    wait_until(lambda: campaign_requests(stack, campaign_id) >= 10, 60, "10 requests")
    stack.kill("relay")  # SIGKILL the relay and its pacer mid-campaign
    stack.start_relay()
    wait_until(lambda: campaign_requests(stack, campaign_id) >= 25, 60, "25 requests")
    # On a loaded machine the pacer's ticks come late: the pause waits for a queue, as the
    # consumer at one call at a time falls behind the pace.
    wait_until(lambda: queued(stack, campaign_id) >= 10, 60, "10 rows queued")
    paused = run_mailbus("campaign", "pause", str(campaign_id), env=env)
    assert paused.returncode == 0, paused.stderr
    held = int(paused.stdout.strip().rsplit(" ", 1)[-1])
    assert held > 0  # rows were queued when the pause came
    time.sleep(2)  # the call in flight, and any claim taken ahead, finish
    at_pause = campaign_requests(stack, campaign_id)
    time.sleep(5)
    assert campaign_requests(stack, campaign_id) == at_pause  # nothing new while paused
    counts = status(stack, campaign_id)["counts"]
    assert counts["waiting"] > 0 and counts["queued"] > 0  # type: ignore[index]

    assert run_mailbus("campaign", "resume", str(campaign_id), env=env).returncode == 0
    wait_until(lambda: status(stack, campaign_id)["state"] == "finished", 90, "the end")
    stack.wait_settled(60)

    ledger = stack.ledger()["keys"]
    expected = {f"campaign-{campaign_id}-user-{i}" for i in range(1, n + 1) if i not in suppressed}
    campaign_keys = {k for k in ledger if k.startswith(f"campaign-{campaign_id}-")}
    assert campaign_keys == expected
    assert all(ledger[k]["accepted"] == 1 for k in expected)
    assert stack.accepted_twice() == []
    final = status(stack, campaign_id)
    assert final["counts"] == {
        "waiting": 0,
        "created": n - len(suppressed),
        "queued": 0,
        "sending": 0,
        "accepted": n - len(suppressed),
        "failed": 0,
        "expired": 0,
        "suppressed": len(suppressed),
        "cancelled": 0,
    }
    stack.assert_table_agrees_with_providers()
