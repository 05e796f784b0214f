"""One structured INFO line per recorded outcome of a send (issue 22, item 8).

The line's message is ``outcome`` and its fields (JSON keys of the line, see
``mailbus.kernel.logs``) say which mail, what became of it and how long the call took:
``send_id``, ``dedupe_key``, ``priority``, ``status``, ``provider``, ``message_id``,
``attempt``, ``latency_ms``, plus ``status_code``, ``provider_code`` and ``reason`` when
there are some. The address is not a field (the row has it); the redacting filter masks
any that a reason quotes. :func:`outcome_fields` is pure; :func:`log_outcome` writes it,
after the outcome was recorded.
"""

from __future__ import annotations

import logging

from mailbus.consumer.core.decide import Decision, SendView

__all__ = ["DEFAULT_PROVIDER", "log_outcome", "outcome_fields"]

log = logging.getLogger("mailbus.consumer.outcome")
DEFAULT_PROVIDER = "default"  # email_sends.provider NULL: the process's MAILBUS_PROVIDER


def outcome_fields(
    row: SendView, decision: Decision, provider: str | None, latency_s: float | None
) -> dict[str, object]:
    """The line's fields for ``row`` settled by ``decision`` (``latency_s`` None: no call)."""
    fields: dict[str, object] = {
        "send_id": row.id,
        "dedupe_key": row.dedupe_key,
        "priority": row.priority,
        "status": decision.next_status.value,
        "provider": provider or DEFAULT_PROVIDER,
        "message_id": decision.message_id,
        "attempt": row.attempts,
        "latency_ms": None if latency_s is None else round(latency_s * 1000, 1),
    }
    optional = {
        "status_code": decision.status_code,
        "provider_code": decision.provider_code,
        "reason": decision.reason or None,
    }
    fields.update({name: value for name, value in optional.items() if value is not None})
    return fields


def log_outcome(
    row: SendView, decision: Decision, provider: str | None, latency_s: float | None
) -> None:
    if log.isEnabledFor(logging.INFO):  # the fields cost a dict per mail: not at WARNING
        log.info("outcome", extra=outcome_fields(row, decision, provider, latency_s))
