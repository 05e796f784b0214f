"""The sandbox's fault plan: parsing, round trips and per-request selection (pure)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.kernel.errors import MailbusError
from mailbus.sandbox.faults import (
    FAULT_KINDS,
    Fault,
    FaultPlan,
    FaultSpecError,
    build_plan,
    choose_fault,
    fault_from_dict,
    parse_fault,
    plan_from_dict,
)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("429:share=0.2:retry_after=3", Fault("429", share=0.2, retry_after=3)),
        ("503:next=5", Fault("503", next=5)),
        ("slow:share=1:ms=200", Fault("slow", share=1.0, ms=200.0)),
        ("422", Fault("422", share=1.0)),
        ("drop_before_accept:share=0", Fault("drop_before_accept", share=0.0)),
        ("drop_after_accept:next=1", Fault("drop_after_accept", next=1)),
        (
            "hang_after_accept:next=2:hang_seconds=1.5",
            Fault("hang_after_accept", next=2, hang_seconds=1.5),
        ),
        ("malformed:share=0.5", Fault("malformed", share=0.5)),
        (" 503:next=1 ", Fault("503", next=1)),
    ],
)
def test_parse_fault(spec: str, expected: Fault) -> None:
    assert parse_fault(spec) == expected


def test_defaults() -> None:
    assert parse_fault("429").retry_after == 1
    assert parse_fault("hang_after_accept").hang_seconds == 30.0
    assert parse_fault("503").share == 1.0 and parse_fault("503").next is None


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "500",
        "429:share=2",
        "429:share=-0.1",
        "429:share=nan",
        "503:next=-1",
        "503:next=1.5",
        "503:share=0.5:next=2",
        "503:ms=10",  # ms belongs to slow only
        "slow:retry_after=1",
        "429:retry_after=1.5",
        "slow:ms=-1",
        "hang_after_accept:hang_seconds=0",
        "503:next",
        "503:next=",
        "503:=3",
        "503:next=1:next=2",
        "429:share=true",
    ],
)
def test_parse_fault_rejects(spec: str) -> None:
    with pytest.raises(FaultSpecError):
        parse_fault(spec)


def test_spec_error_is_a_mailbus_error_and_a_value_error() -> None:
    with pytest.raises(MailbusError):
        parse_fault("nope")
    assert issubclass(FaultSpecError, ValueError)


def test_plan_from_dict_the_documented_example() -> None:
    plan = plan_from_dict(
        {
            "latency_ms": 50,
            "faults": [{"kind": "429", "share": 0.2, "retry_after": 3}, {"kind": "503", "next": 5}],
        }
    )
    assert plan == FaultPlan(50.0, (Fault("429", share=0.2, retry_after=3), Fault("503", next=5)))
    assert plan_from_dict({}) == FaultPlan()
    assert fault_from_dict({"kind": 503, "next": 1}) == Fault("503", next=1)


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"latency_ms": -1},
        {"latency_ms": "fast"},
        {"faults": {"kind": "503"}},
        {"faults": [{"share": 1}]},
        {"faults": [{"kind": "503", "next": True}]},
        {"faults": [{"kind": "503", "share": None}]},
        {"fault": []},
    ],
)
def test_plan_from_dict_rejects(doc: object) -> None:
    with pytest.raises(FaultSpecError):
        plan_from_dict(doc)  # type: ignore[arg-type]


_faults = st.builds(
    lambda kind, when, ms, retry_after, hang: Fault(
        kind,
        share=when if isinstance(when, float) else None,
        next=when if isinstance(when, int) else None,
        ms=ms if kind == "slow" else 0.0,
        retry_after=retry_after if kind == "429" else 1,
        hang_seconds=hang if kind == "hang_after_accept" else 30.0,
    ),
    st.sampled_from(FAULT_KINDS),
    st.one_of(st.floats(0, 1), st.integers(0, 10**6)),
    st.floats(0, 10**5),
    st.integers(0, 3600),
    st.floats(0.001, 3600),
)


@given(_faults)
def test_round_trips(fault: Fault) -> None:
    assert parse_fault(fault.spec()) == fault
    assert fault_from_dict(fault.to_dict()) == fault


def test_empty_plan_chooses_nothing_and_keeps_the_plan() -> None:
    plan = FaultPlan(latency_ms=7)
    choice = choose_fault(plan, random.Random(0))
    assert choice.fault is None and choice.delay_ms == 7 and choice.plan is plan


def test_next_counts_down_then_stops() -> None:
    plan = build_plan(["503:next=3"])
    rng = random.Random(0)
    kinds = []
    for _ in range(5):
        choice = choose_fault(plan, rng)
        plan = choice.plan
        kinds.append(choice.fault.kind if choice.fault else None)
    assert kinds == ["503", "503", "503", None, None]
    assert plan.faults == (Fault("503", next=0),)


def test_counted_faults_come_before_shares() -> None:
    plan = build_plan(["429:share=1", "503:next=1"])
    first = choose_fault(plan, random.Random(0))
    second = choose_fault(first.plan, random.Random(0))
    assert first.fault == Fault("503", next=1)
    assert second.fault == Fault("429", share=1.0)


def test_first_counted_fault_wins_and_only_it_counts_down() -> None:
    plan = build_plan(["422:next=1", "503:next=1"])
    first = choose_fault(plan, random.Random(0))
    second = choose_fault(first.plan, random.Random(0))
    third = choose_fault(second.plan, random.Random(0))
    assert [c.fault.kind if c.fault else None for c in (first, second, third)] == [
        "422",
        "503",
        None,
    ]


def test_slow_adds_to_the_base_latency_and_combines_with_an_outcome() -> None:
    plan = build_plan(["slow:share=1:ms=200", "slow:next=1:ms=50", "429:share=1"], latency_ms=10)
    first = choose_fault(plan, random.Random(0))
    second = choose_fault(first.plan, random.Random(0))
    assert (first.fault and first.fault.kind, first.delay_ms) == ("429", 260)
    assert (second.fault and second.fault.kind, second.delay_ms) == ("429", 210)


@pytest.mark.parametrize("share", [0.0, 0.05, 0.2, 0.5, 0.9, 1.0])
def test_share_is_honoured(share: float) -> None:
    plan = build_plan([f"503:share={share}"])
    rng = random.Random(1234)
    n = 20_000
    hits = sum(choose_fault(plan, rng).fault is not None for _ in range(n))
    assert abs(hits / n - share) < 0.015


def test_shares_are_tried_in_order_and_at_most_one_outcome_applies() -> None:
    plan = build_plan(["429:share=0.5", "503:share=0.5"])
    rng = random.Random(99)
    counts: dict[str | None, int] = {}
    for _ in range(20_000):
        fault = choose_fault(plan, rng).fault
        kind = fault.kind if fault else None
        counts[kind] = counts.get(kind, 0) + 1
    assert abs(counts["429"] / 20_000 - 0.5) < 0.015
    assert abs(counts["503"] / 20_000 - 0.25) < 0.015
    assert abs(counts[None] / 20_000 - 0.25) < 0.015


def test_same_seed_same_choices() -> None:
    plan = build_plan(["429:share=0.3", "slow:share=0.5:ms=5", "malformed:share=0.1"])

    def run(seed: int) -> list[tuple[str | None, float]]:
        rng = random.Random(seed)
        out = []
        for _ in range(200):
            choice = choose_fault(plan, rng)
            out.append((choice.fault.kind if choice.fault else None, choice.delay_ms))
        return out

    assert run(7) == run(7)
    assert run(7) != run(8)


@given(st.integers(0, 50), st.integers(0, 80))
def test_a_counted_fault_fires_exactly_n_times(n: int, requests: int) -> None:
    plan = build_plan([f"drop_after_accept:next={n}"])
    fired = 0
    for _ in range(requests):
        choice = choose_fault(plan, random.Random(0))
        plan = choice.plan
        fired += choice.fault is not None
    assert fired == min(n, requests)


def test_a_fault_naming_a_domain_fires_only_for_that_domain() -> None:
    fault = parse_fault("429:domain=Slow.Example:retry_after=2")
    assert fault.domain == "slow.example" and fault.to_dict()["domain"] == "slow.example"
    assert parse_fault(fault.spec()) == fault
    plan = FaultPlan(faults=(fault,))
    rng = random.Random(1)
    assert choose_fault(plan, rng, "slow.example").fault == fault
    assert choose_fault(plan, rng, "fast.example").fault is None
    counted = FaultPlan(faults=(parse_fault("503:next=1:domain=slow.example"),))
    after_other = choose_fault(counted, rng, "fast.example").plan
    assert after_other == counted  # another domain's request does not count it down


@pytest.mark.parametrize("domain", ["", "a@b.example", 5])
def test_a_bad_fault_domain_is_refused(domain: object) -> None:
    with pytest.raises(FaultSpecError):
        fault_from_dict({"kind": "429", "domain": domain})
