"""SES v2's error codes mapped onto the outcome classes (docs/providers.md)."""

from __future__ import annotations

import pytest

from mailbus.consumer.core.outcome import Outcome, classify
from mailbus.providers.ses.sending import ses_error_result


@pytest.mark.parametrize(
    ("status", "code", "outcome", "account"),
    [
        (429, "TooManyRequestsException", Outcome.RETRY, False),
        (400, "Throttling", Outcome.RETRY, False),
        (400, "MessageRejected", Outcome.REJECTED, False),
        (400, "MailFromDomainNotVerifiedException", Outcome.RETRY, False),  # the sender's
        (404, "NotFoundException", Outcome.REJECTED, False),
        (400, "AccountSuspendedException", Outcome.RETRY, True),
        (400, "SendingPausedException", Outcome.RETRY, True),
        (403, "UnrecognizedClientException", Outcome.RETRY, True),
        # no key, no look-up: a 5xx may have been accepted, so it is not a definite "no"
        (500, "InternalFailure", Outcome.UNKNOWN, False),
        (503, "ServiceUnavailable", Outcome.UNKNOWN, False),
    ],
)
def test_error_codes_give_the_outcome(
    status: int, code: str, outcome: Outcome, account: bool
) -> None:
    result = classify(ses_error_result(status, code, "m"))
    assert result.outcome is outcome
    assert (result.server_stage == "account") is account
    assert code in result.reason
