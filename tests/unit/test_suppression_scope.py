"""Which suppression stops which mail: the scope's rule, and bulk mail as the shipped policy
book and campaigns define it."""

from __future__ import annotations

import pytest

from mailbus.consumer.core.suppression import Scope, is_bulk, stops
from mailbus_client.policies import configured_policy_book

BOOK = configured_policy_book({})


@pytest.mark.parametrize(
    ("template", "campaign_id", "bulk"),
    [
        ("password_reset", None, False),
        ("login_code", None, False),
        ("order_confirmation", None, False),
        ("welcome", None, False),  # the default policy: transactional
        ("newsletter", None, True),
        ("digest_weekly", None, True),
        ("spring_sale", 7, True),  # any template, in a campaign
        ("password_reset", 7, True),
    ],
)
def test_bulk_mail_is_a_campaigns_or_the_bulk_policys(
    template: str, campaign_id: int | None, bulk: bool
) -> None:
    assert is_bulk(campaign_id, BOOK.for_template(template).name) is bulk


@pytest.mark.parametrize(
    ("scope", "bulk", "stopped"),
    [
        (None, False, False),
        (None, True, False),
        ("bulk", False, False),  # an unsubscribe or complaint: a password reset still goes
        ("bulk", True, True),
        ("all", False, True),  # a hard bounce or a manual entry: nothing goes
        ("all", True, True),
    ],
)
def test_a_scope_stops_what_it_covers(scope: Scope | None, bulk: bool, stopped: bool) -> None:
    campaign_id = 1 if bulk else None
    assert stops(scope, campaign_id, "transactional") is stopped
