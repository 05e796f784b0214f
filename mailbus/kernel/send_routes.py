"""``email_sends.provider``: which provider took a row's calls, as the consumer records it
and the webhooks match an event against it. NULL for the default provider, the priority
(``p0``) for a priority's own (``MAILBUS_PROVIDER_P0_URL``), and ``fallback:<kind>`` for
the fallback (MAILBUS_FALLBACK_PROVIDER), whose kind is recorded so that a restart with
another fallback never looks up, resends or matches events of a mail the earlier one took."""

from __future__ import annotations

__all__ = ["FALLBACK", "fallback_route"]

FALLBACK = "fallback"  # the fallback's calls recorded before its kind was (any kind)


def fallback_route(kind: str) -> str:
    """email_sends.provider of a call taken by a fallback of ``kind`` (``http``,
    ``postmark``, ...)."""
    return f"{FALLBACK}:{kind}"
