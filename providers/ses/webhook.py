"""``POST /webhooks/ses``: SES events through SNS, verified against the topic's signing
certificate (:mod:`mailbus.providers.ses.certificates`) and parsed by
:mod:`mailbus.providers.ses.events`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime

from mailbus.feedback.native.inbound import Inbound
from mailbus.feedback.native.routes import MIB, BodySigned, Clock
from mailbus.feedback.signature import Verdict
from mailbus.kernel.settings import Settings
from mailbus.providers.ses import events as sns
from mailbus.providers.ses.certificates import CertificateSource

__all__ = ["Ses", "receiver"]


class Ses(BodySigned):
    """SES through SNS: only the ``topic_arns`` given; certificates from ``source``."""

    name = "ses"
    max_body = 1 * MIB  # an SNS message is at most 256 KiB, escaped once more in JSON

    def __init__(
        self, topic_arns: frozenset[str], source: CertificateSource, clock: Clock = time.time
    ) -> None:
        self._topics, self._source, self._clock = topic_arns, source, clock

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        message = sns.envelope(body)
        if message is None:
            return Verdict(False, "malformed")
        if message.get("TopicArn") not in self._topics:
            return Verdict(False, "topic")
        url = message.get("SigningCertURL", "")
        if not sns.allowed_url(url, self._source.hosts):
            return Verdict(False, "cert_url")
        pem = await self._source.certificate(url)  # FetchError: 503
        return sns.check_signature(message, pem, datetime.fromtimestamp(self._clock(), UTC))

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        message = sns.envelope(body)
        assert message is not None  # verified before
        inbound = sns.parse(message)
        if inbound.subscribe_url is not None:
            await self._source.confirm(inbound.subscribe_url)
        return inbound

    async def close(self) -> None:
        await self._source.close()


def receiver(settings: Settings, clock: Clock) -> Ses | None:
    """The route MAILBUS_SES_TOPIC_ARNS enables."""
    if not settings.ses_topic_arns:
        return None
    source = CertificateSource(settings.ses_cert_hosts, settings.ses_ca_file)
    return Ses(settings.ses_topic_arns, source, clock)
