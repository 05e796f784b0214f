"""What one SMTP exchange means: the SMTP reply table, as a pure function.

The SMTP adapter turns every exchange into an :class:`SmtpReply` (a reply code from the
server, with the stage it answered), an :class:`SmtpDown` (no reply before the message
was sent) or a :class:`~mailbus.consumer.core.outcome.TransportFailure` (lost once DATA was sent);
:func:`classify_smtp` maps them to an :class:`~mailbus.consumer.core.outcome.Outcome`.

Only the replies to RCPT and DATA are about this mail. Connecting, the greeting,
EHLO/STARTTLS, AUTH and MAIL FROM are about the server and our account at it (a connection
limit, a rotated password, a sender the server refuses): every recipient would get the same
answer, so they are the provider's state (``server_stage`` set: the breaker counts them, no
recipient domain is throttled, the mail is retried without spending an attempt) and never
a recipient's ``failed``. So is ``530`` (authentication required) at any stage.

=================================================  ========  ==============================
reply                                              outcome   why
=================================================  ========  ==============================
2xx to the end of DATA                             accepted  the server took the message;
                                                             its queue id if the text has
                                                             one, else our Message-ID
any reply at connect, auth or mail; 530 anywhere   retry     the server's state, not the
                                                             mail's (``server_stage``)
421, 450, 451, 452, any other 4xx (RCPT, DATA)     retry     temporary, RFC 5321 4.2.1
5xx (RCPT, DATA)                                   rejected  permanent: failed + DLQ; with
                                                             a bad-address enhanced code
                                                             (5.1.1 ...) ``bad_recipient``
anything else (1xx, 3xx, 2xx before the end)       unknown   says nothing about acceptance
no reply before DATA (refused, reset, timeout)     retry     the server's state (SmtpDown)
connection lost after DATA, before the final reply unknown   (a TransportFailure, sent)
=================================================  ========  ==============================

``provider_code`` keeps the reply code and the enhanced status code if the text starts with
one (``550 5.1.1``). :func:`classify_call` classifies any provider's result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mailbus.consumer.core.outcome import (
    CallResult,
    Classification,
    Outcome,
    classify,
    clip_reason,
)

__all__ = [
    "BAD_ADDRESS_CODES",
    "SERVER_STAGES",
    "AnyCallResult",
    "SmtpDown",
    "SmtpReply",
    "classify_call",
    "classify_smtp",
    "queue_id",
]

SERVER_STAGES = frozenset({"connect", "auth", "mail"})  # before the recipient is named
_SESSION_CODES = frozenset({530})  # authentication required: our account, at any stage
# Permanent enhanced codes that say the address itself is bad (RFC 3463 3.2: X.1.1 bad
# destination mailbox, X.1.2 bad destination system, X.1.3 bad mailbox syntax, X.1.6
# mailbox moved without forwarding address; RFC 7505 3: X.1.10 null MX): a hard bounce
# at once, so the address is suppressed (docs/providers.md#a-bad-address-is-suppressed).
BAD_ADDRESS_CODES = frozenset({"5.1.1", "5.1.2", "5.1.3", "5.1.6", "5.1.10"})

_ENHANCED = re.compile(r"\s*([245]\.[0-9]{1,3}\.[0-9]{1,3})\b")
# "250 2.0.0 Ok: queued as 4B3C21E0F" (Postfix), "250 OK id=1rABCD-000123-AB" (Exim),
# "250 2.0.0 Ok <queue id>" -- the queue id is the token after "queued as" or "id=".
_QUEUE_ID = re.compile(r"(?i)(?:queued as|id=)\s*<?([A-Za-z0-9][A-Za-z0-9._@-]{2,127})>?")


@dataclass(frozen=True)
class SmtpReply:
    """A reply from the SMTP server at ``stage`` (``connect``: the greeting, EHLO or
    STARTTLS; ``auth``; ``mail``; ``rcpt``; ``data``; or ``end``: the reply to the message's
    final dot). ``fallback_id`` is our own Message-ID."""

    code: int
    text: str
    stage: str = "end"
    fallback_id: str | None = None


@dataclass(frozen=True)
class SmtpDown:
    """No usable reply before the message was sent, at ``stage`` (``connect``, ``auth``,
    ``mail`` or ``rcpt``): refused, reset, timed out, TLS or AUTH impossible."""

    stage: str
    detail: str = ""


AnyCallResult = CallResult | SmtpReply | SmtpDown


def enhanced_code(reply: SmtpReply) -> str | None:
    match = _ENHANCED.match(reply.text)
    return match.group(1) if match else None


def provider_code(reply: SmtpReply) -> str:
    """``"550 5.1.1"`` or ``"451"``: the reply code and its enhanced status code."""
    enhanced = enhanced_code(reply)
    return f"{reply.code} {enhanced}" if enhanced else str(reply.code)


def queue_id(text: str) -> str | None:
    """The server's queue id if the reply text carries one, else None."""
    match = _QUEUE_ID.search(text)
    return match.group(1) if match else None


def classify_smtp(reply: SmtpReply | SmtpDown) -> Classification:
    """Map one SMTP reply (or its absence before DATA) to its outcome, per the table above."""
    if isinstance(reply, SmtpDown):
        detail = f": {reply.detail}" if reply.detail.strip() else ""
        reason = clip_reason(f"smtp server, {reply.stage}, no reply{detail}")
        return Classification(Outcome.RETRY, reason=reason, server_stage=reply.stage)
    code = provider_code(reply)
    reason = clip_reason(f"smtp {reply.stage} {reply.code} {reply.text}".strip())
    if reply.stage in SERVER_STAGES or (reply.code in _SESSION_CODES and reply.stage != "end"):
        return Classification(
            Outcome.RETRY,
            reason=clip_reason(f"smtp server, {reason.removeprefix('smtp ')}"),
            provider_code=code,
            server_stage=reply.stage,
        )
    if 200 <= reply.code <= 299 and reply.stage == "end":
        message_id = queue_id(reply.text) or reply.fallback_id
        if message_id:
            return Classification(
                Outcome.ACCEPTED, message_id=message_id, reason=reason, provider_code=code
            )
        return Classification(Outcome.UNKNOWN, reason=reason, provider_code=code)
    if 400 <= reply.code <= 499:
        return Classification(Outcome.RETRY, reason=reason, provider_code=code)
    if 500 <= reply.code <= 599:
        bad = enhanced_code(reply) in BAD_ADDRESS_CODES
        return Classification(
            Outcome.REJECTED, reason=reason, provider_code=code, bad_recipient=bad
        )
    return Classification(Outcome.UNKNOWN, reason=reason, provider_code=code)


def classify_call(result: AnyCallResult) -> Classification:
    """Classify an HTTP or SMTP provider's result."""
    if isinstance(result, SmtpReply | SmtpDown):
        return classify_smtp(result)
    return classify(result)
