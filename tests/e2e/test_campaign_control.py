"""Pause and cancel reach a campaign's mail that is retrying after its fan-out ended (issue
18, item 6): the provider answers 429, every recipient is handed out, then `campaign
cancel` (or `pause`) is accepted by the CLI and nothing of the campaign is accepted after
it (until `resume`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from e2e_stack import Stack
from relay_runner import wait_until
from services import run_mailbus

N = 300


def accepted(stack: Stack, campaign_id: int) -> int:
    prefix = f"campaign-{campaign_id}-user-"
    keys = stack.ledger()["keys"]
    return sum(v["accepted"] for k, v in keys.items() if k.startswith(prefix))


def status(stack: Stack, campaign_id: int) -> dict[str, object]:
    done = run_mailbus("campaign", "status", str(campaign_id), "--json", env=stack.env())
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def retrying_after_fan_out(stack: Stack, tmp_path: Path, name: str) -> int:
    """A started campaign of N recipients, every one handed out and tried at least once."""
    audience = tmp_path / f"{name}.csv"
    audience.write_text(
        "user_id,email\n" + "".join(f"{i},{name}{i}@example.com\n" for i in range(1, N + 1))
    )
    created = run_mailbus(
        "campaign", "create", "--name", name, "--template", "newsletter",
        "--audience", str(audience), "--rate", "1000/s", "--start", env=stack.env(),
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    campaign_id = int(created.stdout.strip().splitlines()[-1])

    def all_tried() -> bool:
        [(tried,)] = stack.query(
            "SELECT count(*) FROM email_sends WHERE campaign_id = %s AND attempts > 0",
            campaign_id,
        )
        return bool(tried == N)

    wait_until(all_tried, 60, "every row handed out and answered 429")
    assert status(stack, campaign_id)["state"] == "running"  # handed out, not finished
    return campaign_id


def test_cancel_and_pause_stop_retrying_mail_after_the_fan_out(
    stack: Stack, tmp_path: Path
) -> None:
    stack.set_faults({"kind": "429", "share": 1, "retry_after": 1})
    stack.start_relay()
    stack.start_consumer(priorities="p2")
    env = stack.env()

    cancelled = retrying_after_fan_out(stack, tmp_path, "cancelled")
    done = run_mailbus("campaign", "cancel", str(cancelled), env=env)
    assert done.returncode == 0, done.stderr
    paused = retrying_after_fan_out(stack, tmp_path, "paused")
    done = run_mailbus("campaign", "pause", str(paused), env=env)
    assert done.returncode == 0, done.stderr

    stack.set_faults()  # the provider accepts everything from now on
    time.sleep(4)  # retries were due every second or two
    assert accepted(stack, cancelled) == 0
    assert accepted(stack, paused) == 0
    assert status(stack, cancelled)["state"] == "cancelled"
    assert status(stack, paused)["counts"]["queued"] == N  # type: ignore[index]

    done = run_mailbus("campaign", "resume", str(paused), env=env)
    assert done.returncode == 0, done.stderr
    stack.wait_settled(60)
    wait_until(lambda: status(stack, paused)["state"] == "finished", 30, "the campaign to end")
    assert accepted(stack, cancelled) == 0
    assert status(stack, cancelled)["counts"]["expired"] == N  # type: ignore[index]
    ledger = stack.ledger()["keys"]
    assert all(ledger[f"campaign-{paused}-user-{i}"]["accepted"] == 1 for i in range(1, N + 1))
    assert stack.accepted_twice() == []
    stack.assert_table_agrees_with_providers()
