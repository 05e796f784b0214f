"""The campaign proof: 10,000 recipients from a CSV, 100 of them suppressed (half of
those in another letter case than the CSV has), the import SIGKILLed mid-audience and
taken up again (`campaign import`) while the fan-out hands out its first parts, the
fan-out SIGKILLed at random points, then the relay (which paces the rest) and the
consumers SIGKILLed at random while the campaign is delivered. After restarts: exactly
9,900 rows, each accepted once at the provider, no suppressed address contacted, and
the table agrees with the provider.

The audience was 100,000, then 25,000, until CI had to fit in 15 minutes on a loaded
machine (25,000 mails took over 200 s to deliver there): every phase is still SIGKILLed
mid-way (the import mid-audience, the fan-out mid-hand-out at the same 4 s for the whole
audience, delivery six times), and each assertion is the same at this size."""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from e2e_stack import Stack
from relay_runner import wait_until

N = 10_000
SUPPRESSED = range(100, N + 1, 100)  # 100 users
RATE = "2500/s"  # the fan-out of the whole audience takes 4 s


def write_audience(path: Path) -> None:
    with path.open("w") as out:
        out.write("user_id,email,first_name\n")
        for i in range(1, N + 1):
            # Users 100, 300, 500, ...: mixed case in the CSV, lower case in the suppressions.
            email = f"User{i}@Example.COM" if i % 200 == 100 else f"user{i}@example.com"
            out.write(f"{i},{email},N{i}\n")


@contextlib.contextmanager
def first_half_through_a_fifo(audience: Path) -> Iterator[Path]:
    """A FIFO carrying the header and the first half of ``audience``, held open while the
    block runs: the import that reads it waits for more lines and never reaches the end,
    so its SIGKILL comes mid-audience however fast the machine is."""
    fifo = audience.with_suffix(".fifo")
    os.mkfifo(fifo)
    with audience.open("rb") as full:
        first_half = b"".join(full.readline() for _ in range(N // 2 + 1))
    done = threading.Event()

    def feed() -> None:
        fd = os.open(fifo, os.O_WRONLY)  # blocks until the import opens it
        try:
            os.write(fd, first_half)
            done.wait()
        except BrokenPipeError:
            pass  # the import died before it read all of it
        finally:
            os.close(fd)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        yield fifo
    finally:
        done.set()
        feeder.join(10)


def campaign_figures(stack: Stack, campaign_id: int) -> tuple[str, int, int]:
    (row,) = stack.query(
        "SELECT state, processed, created_rows FROM campaigns WHERE id = %s", campaign_id
    )
    return row  # type: ignore[return-value]


def import_position(stack: Stack) -> tuple[int, bool, int]:
    """(id, importing, imported_through) of the test's campaign, (0, True, 0) before."""
    rows = stack.query("SELECT id, importing, imported_through FROM campaigns")
    return rows[0] if rows else (0, True, 0)  # type: ignore[return-value]


def test_sigkills_during_fan_out_and_delivery_lose_and_double_nothing(
    stack: Stack, tmp_path: Path
) -> None:
    rng = random.Random(1010)
    audience = tmp_path / "audience.csv"
    write_audience(audience)
    # Users 200, 400, ...: upper case in the suppressions, lower case in the CSV.
    stack.query(
        "INSERT INTO email_suppressions (address)"
        " SELECT CASE WHEN i %% 200 = 0 THEN format('USER%%s@EXAMPLE.COM', i)"
        " ELSE format('user%%s@example.com', i) END"
        " FROM generate_series(100, %s, 100) AS i RETURNING 1",
        N,
    )
    consumers = ("consumer-a", "consumer-b")
    for name in consumers:
        stack.start_consumer(name, priorities="p2")

    # The import, in parts of 1,250 lines, started at once and SIGKILLed mid-audience:
    # it reads a FIFO that holds back the second half.
    part = {"MAILBUS_CAMPAIGN_IMPORT_PART": "1250"}
    with first_half_through_a_fifo(audience) as fifo:
        stack.start("import", "campaign", "create", "--name", "proof", "--template",
                    "newsletter", "--audience", str(fifo), "--rate", RATE, "--start",
                    **part)  # fmt: skip
        wait_until(lambda: import_position(stack)[2] > 0, 60, "a committed part")
        time.sleep(rng.uniform(0.0, 0.3))
        stack.kill("import")
    campaign_id, importing, through = import_position(stack)
    assert importing and through < N + 1  # killed mid-import
    # Taken up again from its last part while the fan-out hands out what is there.
    stack.start("import-again", "campaign", "import", str(campaign_id),
                "--audience", str(audience), **part)  # fmt: skip

    # The fan-out alone (`campaign run`), SIGKILLed three times at random points once it
    # has committed something (RATE: about 4 s for the whole audience).
    handed_out = [0]
    for round_ in range(3):
        stack.start(f"fan-out-{round_}", "campaign", "run", str(campaign_id), "--no-progress")
        wait_until(
            lambda: campaign_figures(stack, campaign_id)[1] > handed_out[-1], 60, "a fan-out tick"
        )
        time.sleep(rng.uniform(0.0, 0.6))
        stack.kill(f"fan-out-{round_}")
        handed_out.append(campaign_figures(stack, campaign_id)[1])
    assert 0 < handed_out[1] < N  # the first SIGKILL came mid-fan-out
    assert stack.processes.pop("import-again").wait(120) == 0
    assert import_position(stack)[1:] == (False, N + 1)

    # The relay paces the rest and publishes; it and the consumers die at random.
    roles = {"relay": lambda: stack.start_relay("relay")}
    roles.update({name: (lambda name=name: stack.start_consumer(name, priorities="p2"))
                  for name in consumers})  # fmt: skip
    roles["relay"]()
    kills = 0
    while kills < 6:
        time.sleep(rng.uniform(1.5, 4.0))
        victim = rng.choice(sorted(roles))
        stack.kill(victim)
        roles[victim]()
        kills += 1
    counts = stack.wait_settled(200)
    # A campaign is finished once its last mail is final: the relay's pacer marks it so.
    wait_until(lambda: campaign_figures(stack, campaign_id)[0] == "finished", 60, "finished")
    print(f"fan-out SIGKILLed at {handed_out[1:]} handed out; then {kills} SIGKILLs; {counts}")

    rows = stack.query(
        "SELECT count(*), count(DISTINCT dedupe_key), count(*) FILTER (WHERE status = 'accepted')"
        " FROM email_sends WHERE campaign_id = %s",
        campaign_id,
    )
    assert rows == [(N - len(SUPPRESSED),) * 3]  # exactly 9,900 rows, all accepted
    state, processed, created_rows = campaign_figures(stack, campaign_id)
    assert (state, processed, created_rows) == ("finished", N, N - len(SUPPRESSED))
    keys = stack.ledger()["keys"]
    expected = {f"campaign-{campaign_id}-user-{i}" for i in range(1, N + 1) if i not in SUPPRESSED}
    assert {k for k in keys if k.startswith(f"campaign-{campaign_id}-")} == expected
    assert all(keys[k]["accepted"] == 1 for k in expected)  # each recipient accepted once
    suppressed = {f"user{i}@example.com" for i in SUPPRESSED}
    assert not [k for k, v in keys.items() if (v["to"] or "").lower() in suppressed]
    stack.assert_table_agrees_with_providers()
