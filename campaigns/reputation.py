"""The reputation guard's decision (pure): which campaigns to pause for their bounce and
complaint rates, and why.

A rate is counted over a sliding window of accepted mail: of the mails a provider accepted
since the window's start, the share that hard-bounced, and the share that drew a complaint.
A campaign's window never reaches back before its last start or resume, so a campaign
resumed after a pause is judged by what it sent since.

The thresholds are those a provider publishes for putting an account under review. Amazon
SES: "If the bounce or complaint rates for your account are too high, we might place your
account under review or pause your account's ability to send email"
(https://docs.aws.amazon.com/ses/latest/dg/monitor-sender-reputation.html); its reputation
metrics page names the levels: under review at a bounce rate of 5% and a complaint rate of
0.1% (https://docs.aws.amazon.com/ses/latest/dg/reputationdashboardmessages.html).
SendGrid does not publish its own ("we cannot disclose that information as it is part of
our secret sauce",
https://sendgrid.com/docs/Classroom/Troubleshooting/Account_Administration/your_sendgrid_account_is_at_risk_for_suspension_what_should_i_do.html);
no threshold of Postmark, Mailgun or Resend was found in their documents. So SES's levels
are the default for every provider, and configurable (``MAILBUS_REPUTATION_BOUNCE_RATE``,
``MAILBUS_REPUTATION_COMPLAINT_RATE``). A rate counts from a minimum number of accepted
mails on (``MAILBUS_REPUTATION_MIN_SENDS``): one bounce in ten mails says little.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Pause", "Rates", "Thresholds", "decide", "judge"]


@dataclass(frozen=True)
class Thresholds:
    bounce_rate: float = 0.05  # SES: under review at 5% hard bounces
    complaint_rate: float = 0.001  # SES: under review at 0.1% complaints
    min_sends: int = 500  # accepted mails in the window before a rate counts


@dataclass(frozen=True)
class Rates:
    """What one provider (campaign_id None) or one campaign's mail through one provider
    did in the window."""

    provider: str
    campaign_id: int | None
    sent: int  # accepted in the window
    bounced: int  # of those, hard-bounced
    complained: int  # of those, complained about

    @property
    def bounce_rate(self) -> float:
        return self.bounced / self.sent if self.sent else 0.0

    @property
    def complaint_rate(self) -> float:
        return self.complained / self.sent if self.sent else 0.0


@dataclass(frozen=True)
class Pause:
    campaign_id: int
    reason: str


def judge(rates: Rates, thresholds: Thresholds) -> str | None:
    """Why these rates cross a threshold (a rate at the threshold crosses it, as SES
    reviews "at" 5%), or None: under both, or too few mails to tell."""
    if rates.sent < thresholds.min_sends:
        return None
    if rates.bounce_rate >= thresholds.bounce_rate:
        return (
            f"bounce rate {rates.bounce_rate:.2%} ({rates.bounced} of {rates.sent} accepted"
            f" through {rates.provider}) reached {thresholds.bounce_rate:.2%}"
        )
    if rates.complaint_rate >= thresholds.complaint_rate:
        return (
            f"complaint rate {rates.complaint_rate:.2%} ({rates.complained} of {rates.sent}"
            f" accepted through {rates.provider}) reached {thresholds.complaint_rate:.2%}"
        )
    return None


def decide(campaign_rates: list[Rates], thresholds: Thresholds) -> list[Pause]:
    """The running campaigns to pause, each once (its first crossing provider's reason),
    in id order."""
    pauses: dict[int, Pause] = {}
    for rates in sorted(campaign_rates, key=lambda r: (r.campaign_id or 0, r.provider)):
        if rates.campaign_id is None or rates.campaign_id in pauses:
            continue
        reason = judge(rates, thresholds)
        if reason is not None:
            pauses[rates.campaign_id] = Pause(rates.campaign_id, "reputation: " + reason)
    return list(pauses.values())
