"""The sandbox's fault plan: which requests to slow down, refuse, drop, hang or garble.

Pure values and functions; randomness is passed in. A plan is a base latency plus a tuple
of :class:`Fault`. Each fault fires either for a ``share`` of requests (0..1, drawn from the
injected :class:`random.Random`) or for the ``next`` N requests (a counter that
:func:`choose_fault` counts down by returning a new plan).

For one request, every ``slow`` fault that fires adds its ``ms`` to the delay; of all other
kinds at most one applies: first any ``next`` fault with a count left, then the ``share``
faults, each in plan order.

Textual form (``--fault``): ``KIND[:name=value]...``, e.g. ``429:share=0.2:retry_after=3``,
``503:next=5``, ``slow:share=1:ms=200``, ``hang_after_accept:next=1:hang_seconds=5``,
``500_after_accept:next=1`` (the mail is accepted, the reply a 500: what Postmark's "In
most cases the message is lost" leaves open, and a gateway's error after acceptance). With
neither ``share`` nor ``next`` the fault applies to every request (``share=1``). Any fault
may name a recipient ``domain`` (``429:domain=slow.example:retry_after=2``): it then fires
only for sends to that domain, and a 429 so scoped says so (``X-Throttle-Scope:
recipient-domain``), as a mailbox provider deferring one sender does.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from mailbus.kernel.errors import MailbusError

__all__ = [
    "FAULT_KINDS",
    "Choice",
    "Fault",
    "FaultPlan",
    "FaultSpecError",
    "build_plan",
    "choose_fault",
    "fault_from_dict",
    "parse_fault",
    "plan_from_dict",
]

FAULT_KINDS = (
    "slow",
    "429",
    "503",
    "422",
    "drop_before_accept",
    "drop_after_accept",
    "hang_after_accept",
    "malformed",
    "500_after_accept",  # accepted, then a 500 in the dialect's error body (a lost reply)
)

# Parameters each kind accepts besides ``share``/``next``, with their parsers.
_KIND_PARAMS: dict[str, tuple[str, ...]] = {
    "slow": ("ms",),
    "429": ("retry_after",),
    "hang_after_accept": ("hang_seconds",),
}


class FaultSpecError(MailbusError, ValueError):
    """A fault spec or plan document that cannot be understood; the message says why."""


@dataclass(frozen=True)
class Fault:
    """One fault: its kind, when it fires (``share`` xor ``next``) and its parameters."""

    kind: str
    share: float | None = None
    next: int | None = None
    ms: float = 0.0
    retry_after: int = 1
    hang_seconds: float = 30.0
    domain: str | None = None  # fires only for sends to this recipient domain

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise FaultSpecError(f"unknown fault kind {self.kind!r} (one of {FAULT_KINDS})")
        if self.share is not None and self.next is not None:
            raise FaultSpecError(f"{self.kind}: give share or next, not both")
        if self.share is None and self.next is None:
            object.__setattr__(self, "share", 1.0)
        if self.share is not None and not 0.0 <= self.share <= 1.0:
            raise FaultSpecError(f"{self.kind}: share must be within 0..1")
        if self.next is not None and self.next < 0:
            raise FaultSpecError(f"{self.kind}: next must be >= 0")
        if self.ms < 0:
            raise FaultSpecError(f"{self.kind}: ms must be >= 0")
        if self.retry_after < 0:
            raise FaultSpecError(f"{self.kind}: retry_after must be >= 0")
        if self.hang_seconds <= 0:
            raise FaultSpecError(f"{self.kind}: hang_seconds must be > 0")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form accepted by :func:`fault_from_dict`."""
        out: dict[str, Any] = {"kind": self.kind}
        out.update({"share": self.share} if self.next is None else {"next": self.next})
        for name in _KIND_PARAMS.get(self.kind, ()):
            out[name] = getattr(self, name)
        if self.domain is not None:
            out["domain"] = self.domain
        return out

    def spec(self) -> str:
        """The textual form accepted by :func:`parse_fault`."""
        params = (f"{k}={v}" for k, v in self.to_dict().items() if k != "kind")
        return ":".join([self.kind, *params])


@dataclass(frozen=True)
class FaultPlan:
    """Base latency for every send plus the faults, in the order they are tried."""

    latency_ms: float = 0.0
    faults: tuple[Fault, ...] = ()

    def __post_init__(self) -> None:
        if self.latency_ms < 0:
            raise FaultSpecError("latency_ms must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form accepted by :func:`plan_from_dict`."""
        return {"latency_ms": self.latency_ms, "faults": [f.to_dict() for f in self.faults]}


class Choice(NamedTuple):
    """What to do with one request, and the plan to use for the next one."""

    fault: Fault | None
    delay_ms: float
    plan: FaultPlan


def choose_fault(plan: FaultPlan, rng: random.Random, domain: str = "") -> Choice:
    """Pick the fault (or none) and the total delay for one request to a recipient of
    ``domain``; count ``next`` down. A fault naming another domain is passed over."""
    if not plan.faults:
        return Choice(None, plan.latency_ms, plan)
    faults = list(plan.faults)
    delay = plan.latency_ms
    chosen: int | None = None
    for i, fault in enumerate(faults):  # counted faults first
        if fault.domain is not None and fault.domain != domain:
            continue
        if fault.next and (fault.kind == "slow" or chosen is None):
            faults[i] = replace(fault, next=fault.next - 1)
            if fault.kind == "slow":
                delay += fault.ms
            else:
                chosen = i
    for i, fault in enumerate(faults):  # then shares, drawing only what is needed
        if fault.share is None or fault.share == 0.0:
            continue
        if fault.domain is not None and fault.domain != domain:
            continue
        if fault.kind != "slow" and chosen is not None:
            continue
        if fault.share >= 1.0 or rng.random() < fault.share:
            if fault.kind == "slow":
                delay += fault.ms
            else:
                chosen = i
    changed = any(a is not b for a, b in zip(faults, plan.faults, strict=True))
    new_plan = replace(plan, faults=tuple(faults)) if changed else plan
    return Choice(plan.faults[chosen] if chosen is not None else None, delay, new_plan)


def parse_fault(spec: str) -> Fault:
    """Parse ``KIND[:name=value]...`` (see the module docstring) into a :class:`Fault`."""
    kind, *params = spec.strip().split(":")
    values: dict[str, Any] = {"kind": kind}
    for param in params:
        name, sep, value = param.partition("=")
        if not sep or not name or not value:
            raise FaultSpecError(f"{spec!r}: expected name=value, got {param!r}")
        if name in values:
            raise FaultSpecError(f"{spec!r}: {name} given twice")
        values[name] = value
    return fault_from_dict(values)


def fault_from_dict(data: Mapping[str, Any]) -> Fault:
    """Build a :class:`Fault` from its JSON form, e.g. ``{"kind": "503", "next": 5}``."""
    if not isinstance(data, Mapping) or "kind" not in data:
        raise FaultSpecError("a fault must be an object with a 'kind'")
    kind = str(data["kind"])
    allowed = ("share", "next", "domain", *_KIND_PARAMS.get(kind, ()))
    kwargs: dict[str, Any] = {}
    for name, raw in data.items():
        if name == "kind":
            continue
        if name == "domain":
            if not isinstance(raw, str) or not raw.strip() or "@" in raw:
                raise FaultSpecError(f"{kind}: domain must be a domain name, got {raw!r}")
            kwargs[name] = raw.strip().lower()
            continue
        if name not in allowed:
            raise FaultSpecError(f"{kind}: unknown parameter {name!r} (allowed: {allowed})")
        as_int = name in ("next", "retry_after")
        kwargs[name] = _number(f"{kind}: {name}", raw, integer=as_int)
    return Fault(kind=kind, **kwargs)


def plan_from_dict(data: Mapping[str, Any]) -> FaultPlan:
    """Build a plan from ``{"latency_ms": 50, "faults": [{...}, ...]}`` (both optional)."""
    if not isinstance(data, Mapping):
        raise FaultSpecError("a fault plan must be a JSON object")
    unknown = set(data) - {"latency_ms", "faults"}
    if unknown:
        raise FaultSpecError(f"unknown plan fields: {sorted(unknown)}")
    faults = data.get("faults", [])
    if not isinstance(faults, list):
        raise FaultSpecError("faults must be a list")
    latency = _number("latency_ms", data.get("latency_ms", 0), integer=False)
    return FaultPlan(latency_ms=latency, faults=tuple(fault_from_dict(f) for f in faults))


def build_plan(specs: Iterable[str] = (), latency_ms: float = 0.0) -> FaultPlan:
    """A plan from textual specs (the CLI's repeated ``--fault``) and a base latency."""
    return FaultPlan(latency_ms=latency_ms, faults=tuple(parse_fault(s) for s in specs))


def _number(name: str, raw: object, *, integer: bool) -> Any:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise FaultSpecError(f"{name} must be a number, got {raw!r}")
    try:
        value = float(raw)
    except ValueError:
        raise FaultSpecError(f"{name} must be a number, got {raw!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise FaultSpecError(f"{name} must be finite")
    if integer:
        if not value.is_integer():
            raise FaultSpecError(f"{name} must be a whole number, got {raw!r}")
        return int(value)
    return value
