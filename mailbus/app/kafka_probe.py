"""The start-up check of a Kafka client's TLS and SASL settings.

librdkafka treats a refused password or an unverifiable broker certificate like a broker
outage: it logs and retries for ever. Both are configuration errors, so every command that
talks to Kafka over TLS or SASL first connects once; a refusal raises :class:`ConfigError`
naming the setting to fix (exit status 2). A broker that does not answer is not refused:
the command starts and retries as it always does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaError, KafkaException, Producer

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.kafka_security import KafkaSecurity, kafka_client_config
from mailbus.kernel.settings import Settings

__all__ = ["check_kafka_access", "refusal"]

_PREFIX = "MAILBUS_KAFKA_"


def refusal(security: KafkaSecurity, errors: Sequence[KafkaError]) -> ConfigError | None:
    """The configuration error that ``errors`` (from librdkafka's error callback) show, if
    any: credentials refused, or a broker certificate that cannot be verified."""
    for error in errors:
        text = error.str()
        if error.code() == KafkaError._AUTHENTICATION:
            secret = (
                "OAUTH_CLIENT_SECRET"
                if security.sasl_mechanism == "OAUTHBEARER"
                else ("SASL_PASSWORD")
            )
            who = security.sasl_username or security.oauth_client_id
            return ConfigError(
                f"{_PREFIX}{secret}",
                f"the broker refused the credentials of {who!r} ({security.sasl_mechanism}):"
                f" {_reason(text)}",
            )
        if "certificate verify failed" in text:
            ca = security.ssl_ca_location or "the system's CA certificates"
            return ConfigError(
                f"{_PREFIX}SSL_CA_LOCATION",
                f"the broker's certificate cannot be verified with {ca}: {_reason(text)}",
            )
        if error.code() == KafkaError._SSL:
            return ConfigError(
                f"{_PREFIX}SECURITY_PROTOCOL",
                f"TLS handshake with the broker failed ({security.protocol}): {_reason(text)}",
            )
    return None


def check_kafka_access(
    settings: Settings, wait: float = 15.0, clock: Callable[[], float] = time.monotonic
) -> None:
    """Connect once with ``settings``; raise :class:`ConfigError` if the broker refuses.

    Returns as soon as the broker answers, or after ``wait`` seconds without an answer or
    a refusal (an unreachable broker is for the caller's usual retries). PLAINTEXT has
    nothing to refuse and is not checked.
    """
    security = settings.kafka_security
    if security.protocol == "PLAINTEXT":
        return
    errors: list[KafkaError] = []
    producer = Producer(
        {**kafka_client_config(settings), "error_cb": errors.append, "log_level": 0}
    )
    deadline = clock() + wait
    while clock() < deadline:
        try:
            producer.list_topics(timeout=1.0)
            return
        except KafkaException:
            producer.poll(0)  # serves the error callback
        refused = refusal(security, errors)
        if refused is not None:
            raise refused


def _reason(text: str) -> str:
    """librdkafka's message without its ``proto://host:port/id: `` prefix."""
    _head, sep, rest = text.partition("/bootstrap: ")
    return rest if sep else text
