"""Chaos: mixed provider faults while the relay and consumers are SIGKILLed at random.

3,000 rows and 30 s of SIGKILLs (about 15) since CI runs three lanes on two cores: at
5,000 rows the consumers' adaptive limits, cut to one to three calls by the faults' latency and the
lanes' load, did not settle the rows within the wait. The fault mix and every assertion
are as they were."""

from __future__ import annotations

import random
import time

from e2e_stack import Stack

FAULTS = [  # 20% of requests in all
    {"kind": "503", "share": 0.05},
    {"kind": "429", "share": 0.03, "retry_after": 1},
    {"kind": "drop_before_accept", "share": 0.03},
    {"kind": "drop_after_accept", "share": 0.03},
    {"kind": "hang_after_accept", "share": 0.02, "hang_seconds": 5},
    {"kind": "malformed", "share": 0.02},
    {"kind": "422", "share": 0.01},
    {"kind": "slow", "share": 0.01, "ms": 1500},
]


def test_random_sigkills_under_mixed_faults_lose_and_double_nothing(stack: Stack) -> None:
    rng = random.Random(2026)
    stack.set_faults(*FAULTS)
    total = 3_000
    for priority, share in (("p0", 0.1), ("p1", 0.5), ("p2", 0.4)):
        stack.seed(int(total * share), prefix=f"chaos-{priority}", priority=priority)
    # A breaker that stays open 30 s (six failed probes in a row: a slow run's 1 s timeouts
    # make that likely) starts the recovery ramp, which caps sends at 100/min for ten
    # minutes by default: the rest of the 3,000 rows would then outlast the test. The ramp
    # still runs here, over 10 s.
    env = {
        "MAILBUS_REQUEST_TIMEOUT": "1",
        "MAILBUS_MAX_ATTEMPTS": "30",
        "MAILBUS_RECOVERY_RAMP": "10s",
    }
    roles = {
        "relay": lambda name: stack.start_relay(name, **env),
        "consumer-a": lambda name: stack.start_consumer(name, **env),
        "consumer-b": lambda name: stack.start_consumer(name, **env),
    }
    for name, start in roles.items():
        start(name)
    kills = 0
    deadline = time.monotonic() + 30  # about 15 SIGKILLs; then the rows settle
    while time.monotonic() < deadline and not stack.settled():
        time.sleep(rng.uniform(1, 3))
        victim = rng.choice(sorted(roles))
        stack.kill(victim)
        roles[victim](victim)
        kills += 1
    counts = stack.wait_settled(200)  # fails with the open rows before pytest's 300 s
    print(f"{kills} SIGKILLs; final states {dict(counts)}")
    assert kills >= 4
    assert sum(counts.values()) == total

    stack.assert_table_agrees_with_providers()
    rows = stack.query("SELECT dedupe_key, status FROM email_sends")
    assert {status for _, status in rows} <= {"accepted", "failed"}
    failed = {k for k, s in rows if s == "failed"}
    dead = {k for (k,) in stack.query("SELECT dedupe_key FROM email_dead_letters")}
    assert failed == dead
