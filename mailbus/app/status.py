"""`mailbus status`: what is waiting, how old the oldest is, what is not yet on Kafka
(sends and outcome events), what failed, how the provider is answering (failure and 429
rates, breaker state per consumer process), the reputation guard's bounce and complaint
rates per provider and campaign, each campaign's recipients by state, and the size of the
tables that grow (what `mailbus retention run` keeps in check)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from mailbus.campaigns.guard import ReputationGuard
from mailbus.campaigns.reputation import Rates
from mailbus.campaigns.views import collect_overview, render_overview
from mailbus.feedback.figures import delivery_figures, render_delivery_figures
from mailbus.kernel.errors import StorageError
from mailbus.kernel.settings import Settings

__all__ = ["RATE_WINDOWS", "collect_status", "print_status", "shown_url"]

PRIORITIES = ("p0", "p1", "p2")
STATES = ("pending", "sending", "unknown", "accepted", "failed", "expired", "suppressed")
RATE_WINDOWS = {"5m": 5, "15m": 15}  # label → minutes
BREAKER_FRESH_S = 60  # a provider_health row older than this belongs to a stopped process

_BY_STATUS = """
SELECT priority, status, guarantee, count(*) FROM email_sends GROUP BY priority, status, guarantee
"""
_OLDEST_PENDING = """
SELECT priority, extract(epoch FROM now() - min(created_at))
FROM email_sends WHERE status IN ('pending', 'sending', 'unknown') GROUP BY priority
"""
_UNPUBLISHED = """
SELECT count(*) FROM email_sends WHERE status = 'pending' AND published_at IS NULL
"""
_EVENTS_UNPUBLISHED = "SELECT count(*) FROM email_send_events WHERE published_at IS NULL"
# One pass over the last 15 minutes of attempts (email_attempts_at_idx); 5-minute figures
# are the FILTERed subset.
_ATTEMPT_RATES = """
SELECT count(*) FILTER (WHERE at > now() - interval '5 minutes'),
       count(*) FILTER (WHERE at > now() - interval '5 minutes' AND outcome = 'failed'),
       count(*) FILTER (WHERE at > now() - interval '5 minutes' AND status_code = 429),
       count(*),
       count(*) FILTER (WHERE outcome = 'failed'),
       count(*) FILTER (WHERE status_code = 429)
FROM email_attempts WHERE at > now() - interval '15 minutes'
"""
_DEAD_LETTERS = """
SELECT reason, count(*) FROM email_dead_letters WHERE replayed_at IS NULL
GROUP BY reason ORDER BY count(*) DESC, reason
"""
# Tables that grow with the mail: estimated rows (pg_class.reltuples, kept by ANALYZE; -1
# before the first) and bytes with indexes and TOAST. No count(*) over millions of rows.
GROWING_TABLES = (
    "email_sends",
    "email_attempts",
    "email_dead_letters",
    "delivery_events",
    "email_send_events",
    "email_key_lives",  # one row per dedupe key retention deleted, kept (docs/retention.md)
)
_TABLE_SIZES = """
SELECT c.relname, greatest(c.reltuples, 0)::bigint, pg_total_relation_size(c.oid)
FROM pg_class c WHERE c.oid = ANY(%(tables)s::regclass[]) ORDER BY c.relname
"""
_HAS_PROVIDER_HEALTH = "SELECT to_regclass('provider_health') IS NOT NULL"
_BREAKERS = """
SELECT process, provider, state,
       extract(epoch FROM now() - changed_at), extract(epoch FROM now() - updated_at)
FROM provider_health
WHERE updated_at > now() - make_interval(secs => %(fresh_s)s)
ORDER BY provider, process
"""


def collect_status(database_url: str, guard: ReputationGuard | None = None) -> dict[str, Any]:
    """Everything `mailbus status` shows, as plain JSON-ready values; ``reputation``
    (the guard's rates and thresholds) only with a ``guard``.

    ``breakers`` is ``None`` when the ``provider_health`` table does not exist; rates are
    ``None`` when there was no call in the window.
    """
    try:
        with psycopg.connect(database_url, connect_timeout=5) as conn:
            counts: dict[str, dict[str, int]] = {}
            guarantees: dict[str, int] = {}  # rows sent under each (email_sends.guarantee)
            for priority, status, guarantee, count in conn.execute(_BY_STATUS):
                by_status = counts.setdefault(priority, {})
                by_status[status] = by_status.get(status, 0) + count
                if guarantee is not None:
                    guarantees[guarantee] = guarantees.get(guarantee, 0) + count
            oldest = {p: round(float(age), 1) for p, age in conn.execute(_OLDEST_PENDING)}
            unpublished_row = conn.execute(_UNPUBLISHED).fetchone()
            events_row = conn.execute(_EVENTS_UNPUBLISHED).fetchone()
            attempts_row = conn.execute(_ATTEMPT_RATES).fetchone()
            dead_letters = {reason: n for reason, n in conn.execute(_DEAD_LETTERS)}
            breakers = _breakers(conn)
            delivery_events = delivery_figures(conn)
            campaigns = collect_overview(conn)
            reputation = None if guard is None else _reputation(conn, guard)
            sizes = {
                table: {"rows_estimate": rows, "bytes": size}
                for table, rows, size in conn.execute(
                    _TABLE_SIZES, {"tables": list(GROWING_TABLES)}
                )
            }
    except psycopg.Error as exc:
        raise StorageError(f"cannot read status: {exc}") from exc
    five = attempts_row[0:3] if attempts_row else (0, 0, 0)
    fifteen = attempts_row[3:6] if attempts_row else (0, 0, 0)
    return {
        "by_priority": counts,
        "oldest_open_age_s": oldest,
        "not_yet_on_kafka": unpublished_row[0] if unpublished_row else 0,
        "send_events_unpublished": events_row[0] if events_row else 0,  # outcome events
        "failed": sum(c.get("failed", 0) for c in counts.values()),
        "by_guarantee": guarantees,
        "provider_calls": {"5m": _rates(*five), "15m": _rates(*fifteen)},
        "dead_letters": {
            "not_replayed": sum(dead_letters.values()),
            "by_reason": dead_letters,
        },
        "breakers": breakers,
        "delivery_events": delivery_events,
        "campaigns": campaigns,
        "reputation": reputation,
        "table_sizes": sizes,
    }


def _reputation(conn: psycopg.Connection[Any], guard: ReputationGuard) -> dict[str, Any]:
    measured = guard.measure(conn)
    t = guard.thresholds
    return {
        "window_s": guard.window_s,
        "since": measured.since.isoformat(),
        "thresholds": {
            "bounce_rate": t.bounce_rate,
            "complaint_rate": t.complaint_rate,
            "min_sends": t.min_sends,
        },
        "providers": [_rates_of(r) for r in measured.providers],
        "campaigns": [
            {"campaign": r.campaign_id, "state": state, **_rates_of(r)}
            for r, state in measured.campaigns
        ],
    }


def _rates_of(r: Rates) -> dict[str, Any]:
    return {
        "provider": r.provider,
        "sent": r.sent,
        "bounced": r.bounced,
        "complained": r.complained,
        "bounce_rate": round(r.bounce_rate, 6),
        "complaint_rate": round(r.complaint_rate, 6),
    }


def _rates(calls: int, failures: int, http_429: int) -> dict[str, Any]:
    return {
        "calls": calls,
        "failures": failures,
        "failure_rate": round(failures / calls, 4) if calls else None,
        "http_429": http_429,
        "rate_429": round(http_429 / calls, 4) if calls else None,
    }


def _breakers(conn: psycopg.Connection[Any]) -> list[dict[str, Any]] | None:
    exists = conn.execute(_HAS_PROVIDER_HEALTH).fetchone()
    if not exists or not exists[0]:
        return None
    return [
        {
            "process": process,
            "provider": shown_url(provider),
            "state": state,
            "since_s": round(float(since), 1),
            "updated_s_ago": round(float(updated), 1),
        }
        for process, provider, state, since, updated in conn.execute(
            _BREAKERS, {"fresh_s": BREAKER_FRESH_S}
        )
    ]


def shown_url(url: str) -> str:
    """``url`` without its ``user:password@``: a provider URL recorded before settings
    refused credentials in it (docs/configuration.md) is never printed with them."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def print_status(settings: Settings, as_json: bool) -> int:
    status = collect_status(settings.database_url, ReputationGuard.of(settings))
    if as_json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return 0
    print("\n".join(render_status(status)))
    return 0


def render_status(status: dict[str, Any]) -> list[str]:
    """The human-readable table of :func:`collect_status`'s result, line by line."""
    lines = [f"{'priority':<9}" + "".join(f"{s:>11}" for s in STATES) + f"{'oldest open':>13}"]
    for priority in PRIORITIES:
        row = status["by_priority"].get(priority, {})
        age = status["oldest_open_age_s"].get(priority)
        lines.append(
            f"{priority:<9}" + "".join(f"{row.get(s, 0):>11}" for s in STATES) + f"{_age(age):>13}"
        )
    lines.append(
        f"not yet on Kafka: {status['not_yet_on_kafka']} sends,"
        f" {status['send_events_unpublished']} outcome events   failed: {status['failed']}"
    )
    if status["by_guarantee"]:
        sent_under = ", ".join(f"{g} {n}" for g, n in sorted(status["by_guarantee"].items()))
        lines.append(f"sent under: {sent_under}")
    lines.append("")
    lines.append(
        f"{'provider calls':<16}{'calls':>8}{'failed':>8}{'fail %':>8}{'429s':>8}{'429 %':>8}"
    )
    for window, figures in status["provider_calls"].items():
        lines.append(
            f"{'last ' + window:<16}{figures['calls']:>8}{figures['failures']:>8}"
            f"{_percent(figures['failure_rate']):>8}{figures['http_429']:>8}"
            f"{_percent(figures['rate_429']):>8}"
        )
    dead = status["dead_letters"]
    reasons = ", ".join(f"{reason} {n}" for reason, n in dead["by_reason"].items())
    lines.append("")
    lines.append(
        f"dead letters not replayed: {dead['not_replayed']}" + (f" ({reasons})" if reasons else "")
    )
    breakers = status["breakers"]
    if breakers is None:
        lines.append("breakers: not reported (no provider_health table)")
    elif not breakers:
        lines.append(f"breakers: no consumer reported in the last {BREAKER_FRESH_S}s")
    else:
        lines.append("breakers:")
        for b in breakers:
            lines.append(
                f"  {b['provider']:<12} {b['state']:<10} for {_age(b['since_s']):>7}"
                f"   process {b['process']} (reported {_age(b['updated_s_ago'])} ago)"
            )
    lines.append("")
    lines.append("table sizes (rows estimated): " + _sizes(status["table_sizes"]))
    lines.append("")
    lines.extend(render_delivery_figures(status.get("delivery_events")))
    lines.append("")
    lines.extend(render_overview(status.get("campaigns", [])))
    if status.get("reputation"):
        lines.append("")
        lines.extend(_render_reputation(status["reputation"]))
    return lines


def _render_reputation(rep: dict[str, Any]) -> list[str]:
    t = rep["thresholds"]
    lines = [
        f"reputation (mail accepted in the last {_age(rep['window_s'])}; a campaign pauses at"
        f" {_percent(t['bounce_rate'])} bounces or {t['complaint_rate'] * 100:.2f}% complaints"
        f" from {t['min_sends']} mails):"
    ]
    for r in rep["providers"] + rep["campaigns"]:
        who = f"campaign {r['campaign']} via {r['provider']}" if "campaign" in r else r["provider"]
        lines.append(
            f"  {who:<28}{r['sent']:>10} sent{r['bounced']:>8} bounced"
            f" {_percent(r['bounce_rate']):>6}{r['complained']:>8} complained"
            f" {r['complaint_rate'] * 100:.2f}%"
        )
    if len(lines) == 1:
        lines.append("  no mail accepted in the window")
    return lines


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def _sizes(sizes: dict[str, dict[str, int]]) -> str:
    return ", ".join(
        f"{table} {figures['rows_estimate']} rows {_bytes(figures['bytes'])}"
        for table, figures in sizes.items()
    )


def _bytes(size: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1024:
            return f"{size:.0f} {unit}"
        size //= 1024
    return f"{size} TB"
