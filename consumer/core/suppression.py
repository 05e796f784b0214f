"""Which suppression stops which mail, pure.

An entry of ``email_suppressions`` has a scope that follows its reason (migration 0019
derives it in one place): ``all`` (a hard bounce, a manual entry, any other reason) stops
every mail to the address; ``bulk`` (``complaint``, ``unsubscribed``) stops bulk mail only.

Bulk mail is one clear rule: a row of a campaign (``campaign_id`` set), or a row whose
template falls under the policy named ``bulk`` in the policy book (MAILBUS_POLICY_FILE or
the shipped one: ``newsletter*``, ``campaign*``, ``digest*``). Everything else is
transactional (one-time codes, orders, invoices, alerts, the default) and goes to an
address that only complained or unsubscribed.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["BULK_POLICY", "Scope", "is_bulk", "stops"]

Scope = Literal["all", "bulk"]
BULK_POLICY = "bulk"  # the name of the policy whose templates are bulk mail


def is_bulk(campaign_id: int | None, policy_name: str) -> bool:
    """Whether a row is bulk mail: a campaign's, or a template of the ``bulk`` policy."""
    return campaign_id is not None or policy_name == BULK_POLICY


def stops(scope: Scope | None, campaign_id: int | None, policy_name: str) -> bool:
    """Whether the widest suppression of a row's address (``scope``; None: none) stops the
    row of ``campaign_id`` whose template falls under the policy ``policy_name``."""
    return scope == "all" or (scope == "bulk" and is_bulk(campaign_id, policy_name))
