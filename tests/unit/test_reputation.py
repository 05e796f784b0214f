"""The reputation guard's decision (pure): thresholds, the minimum sample, one pause per
campaign."""

from __future__ import annotations

import pytest

from mailbus.campaigns.reputation import Pause, Rates, Thresholds, decide, judge
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings

SES = Thresholds(bounce_rate=0.05, complaint_rate=0.001, min_sends=500)


def rates(sent: int, bounced: int = 0, complained: int = 0, campaign: int | None = 1) -> Rates:
    return Rates("ses", campaign, sent, bounced, complained)


@pytest.mark.parametrize(
    ("sent", "bounced", "complained", "crosses"),
    [
        (1000, 49, 0, None),  # 4.9%: under
        (1000, 50, 0, "bounce"),  # 5%: SES reviews "at" 5%
        (1000, 0, 0, None),
        (1000, 0, 1, "complaint"),  # 0.1%
        (2000, 0, 1, None),  # 0.05%
        (499, 499, 0, None),  # under the minimum sample: no decision, however bad
        (500, 25, 0, "bounce"),  # the minimum sample itself counts
        (0, 0, 0, None),
    ],
)
def test_judge(sent: int, bounced: int, complained: int, crosses: str | None) -> None:
    reason = judge(rates(sent, bounced, complained), SES)
    assert (reason is None) == (crosses is None)
    if crosses is not None:
        assert reason is not None and reason.startswith(crosses)
        assert f"of {sent} accepted through ses" in reason


def test_a_bounce_reason_names_rate_counts_and_threshold() -> None:
    assert judge(rates(1000, 60), SES) == (
        "bounce rate 6.00% (60 of 1000 accepted through ses) reached 5.00%"
    )


def test_decide_pauses_each_crossing_campaign_once_and_ignores_provider_rows() -> None:
    pauses = decide(
        [
            rates(1000, 60, campaign=2),
            Rates("postmark", 2, 1000, 0, 5),  # the same campaign crosses again: one pause,
            # the reason of the first provider by name
            rates(1000, 10, campaign=3),  # under
            rates(100_000, 90_000, campaign=None),  # a provider's rates: not a campaign
            rates(10, 10, campaign=4),  # too few mails
            rates(600, 0, 1, campaign=1),
        ],
        SES,
    )
    assert [p.campaign_id for p in pauses] == [1, 2]
    assert pauses[0] == Pause(
        1, "reputation: complaint rate 0.17% (1 of 600 accepted through ses) reached 0.10%"
    )
    assert pauses[1].reason.startswith(
        "reputation: complaint rate 0.50% (5 of 1000 accepted through postmark)"
    )


def test_configured_thresholds_apply() -> None:
    strict = Thresholds(bounce_rate=0.02, complaint_rate=0.0005, min_sends=10)
    assert judge(rates(100, 2), strict) is not None
    assert judge(rates(100, 2), SES) is None


@pytest.mark.parametrize(
    "name", ["MAILBUS_REPUTATION_BOUNCE_RATE", "MAILBUS_REPUTATION_COMPLAINT_RATE"]
)
@pytest.mark.parametrize("value", ["5", "1.5"])
def test_a_rate_above_one_is_refused_not_a_guard_that_never_pauses(name: str, value: str) -> None:
    # "5" meant as 5%: no share of accepted mail reaches it, so the guard would never pause
    with pytest.raises(ConfigError, match=name):
        load_settings({name: value})
    assert getattr(load_settings({name: "1"}), name.removeprefix("MAILBUS_").lower()) == 1.0
