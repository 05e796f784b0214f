"""The pure core of delivery: statuses, call classification, backoff and decisions.

No I/O here: time and randomness are passed in, results are values. The adapters
(PostgreSQL ledger, Kafka consumer, HTTP provider) and the service that wires them live
beside this package.
"""

from __future__ import annotations

from mailbus.consumer.core.backoff import RetryPolicy, backoff_ceiling, retry_delay
from mailbus.consumer.core.decide import (
    Decision,
    SendView,
    after_call,
    after_lookup,
    before_send,
    confirm_final,
    lease_expired,
    needs_confirmation,
    needs_lookup,
    unsendable,
    wait_for_provider,
)
from mailbus.consumer.core.outcome import (
    MAX_REASON_CHARS,
    MAX_RETRY_AFTER_S,
    RETRYABLE_STATUS_CODES,
    CallResult,
    Classification,
    Outcome,
    ProviderReply,
    TransportFailure,
    classify,
    clip_reason,
    parse_retry_after,
)
from mailbus.consumer.core.states import (
    TERMINAL,
    TRANSITIONS,
    Status,
    can_transition,
    claimable_from,
)

__all__ = [
    "MAX_REASON_CHARS",
    "MAX_RETRY_AFTER_S",
    "RETRYABLE_STATUS_CODES",
    "TERMINAL",
    "TRANSITIONS",
    "CallResult",
    "Classification",
    "Decision",
    "Outcome",
    "ProviderReply",
    "RetryPolicy",
    "SendView",
    "Status",
    "TransportFailure",
    "after_call",
    "after_lookup",
    "backoff_ceiling",
    "before_send",
    "can_transition",
    "claimable_from",
    "classify",
    "clip_reason",
    "confirm_final",
    "lease_expired",
    "needs_confirmation",
    "needs_lookup",
    "parse_retry_after",
    "retry_delay",
    "unsendable",
    "wait_for_provider",
]
