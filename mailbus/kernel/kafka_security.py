"""TLS and SASL for every Kafka client, from MAILBUS_KAFKA_* settings, in one place.

:func:`kafka_client_config` is the one function that turns settings into the librdkafka
keys every client (relay producer, consumers, intake, admin) starts from::

    Producer({**kafka_client_config(settings), "enable.idempotence": True, ...})

Settings and the librdkafka keys they become:

- ``MAILBUS_KAFKA_BOOTSTRAP`` → ``bootstrap.servers``
- ``MAILBUS_KAFKA_SECURITY_PROTOCOL`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
  → ``security.protocol``
- ``MAILBUS_KAFKA_SASL_MECHANISM`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)
  → ``sasl.mechanism``
- ``MAILBUS_KAFKA_SASL_USERNAME``, ``MAILBUS_KAFKA_SASL_PASSWORD`` (or ``_FILE``)
  → ``sasl.username``, ``sasl.password``
- ``MAILBUS_KAFKA_SSL_CA_LOCATION`` → ``ssl.ca.location`` (PEM file of the CA)
- ``MAILBUS_KAFKA_SSL_CERTIFICATE_LOCATION``, ``MAILBUS_KAFKA_SSL_KEY_LOCATION``,
  ``MAILBUS_KAFKA_SSL_KEY_PASSWORD`` (or ``_FILE``) → ``ssl.certificate.location``,
  ``ssl.key.location``, ``ssl.key.password`` (mutual TLS)
- ``MAILBUS_KAFKA_OAUTH_TOKEN_URL``, ``_CLIENT_ID``, ``_CLIENT_SECRET`` (or ``_FILE``),
  ``_SCOPE`` → ``sasl.oauthbearer.method=oidc`` and its ``sasl.oauthbearer.*`` keys

Hostnames are verified (librdkafka's default ``ssl.endpoint.identification.algorithm=https``).
Inconsistent settings (SASL without a mechanism, PLAIN/SCRAM without credentials, a file
that does not exist) raise :class:`ConfigError` naming the variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mailbus.kernel.errors import ConfigError

__all__ = ["KafkaSecurity", "KafkaSettings", "kafka_client_config", "parse_kafka_security"]

_PREFIX = "MAILBUS_KAFKA_"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str = ""  # never logged (registered as a secret by the CLI)
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str = ""
    oauth_token_url: str | None = None
    oauth_client_id: str | None = None
    oauth_client_secret: str = ""
    oauth_scope: str | None = None

    def __repr__(self) -> str:  # no passwords in reprs
        return f"KafkaSecurity({self.protocol}, {self.sasl_mechanism or 'no SASL'})"

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.sasl_password, self.ssl_key_password, self.oauth_client_secret)


def parse_kafka_security(env: Mapping[str, str]) -> KafkaSecurity:
    """The MAILBUS_KAFKA_* security settings of ``env``, checked for consistency."""
    read = _Env(env)
    protocol = (read.raw("SECURITY_PROTOCOL") or "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"{_PREFIX}SECURITY_PROTOCOL", f"expected one of {', '.join(PROTOCOLS)}")
    mechanism = read.raw("SASL_MECHANISM")
    mechanism = mechanism.upper() if mechanism else None
    sasl = protocol.startswith("SASL_")
    if mechanism is not None and mechanism not in MECHANISMS:
        raise ConfigError(f"{_PREFIX}SASL_MECHANISM", f"expected one of {', '.join(MECHANISMS)}")
    if sasl and mechanism is None:
        raise ConfigError(f"{_PREFIX}SASL_MECHANISM", f"required with {protocol}")
    if mechanism is not None and not sasl:
        raise ConfigError(f"{_PREFIX}SASL_MECHANISM", f"needs a SASL_* protocol, not {protocol}")
    security = KafkaSecurity(
        protocol=protocol,
        sasl_mechanism=mechanism,
        sasl_username=read.raw("SASL_USERNAME"),
        sasl_password=read.secret("SASL_PASSWORD"),
        ssl_ca_location=read.file("SSL_CA_LOCATION"),
        ssl_certificate_location=read.file("SSL_CERTIFICATE_LOCATION"),
        ssl_key_location=read.file("SSL_KEY_LOCATION"),
        ssl_key_password=read.secret("SSL_KEY_PASSWORD"),
        oauth_token_url=read.raw("OAUTH_TOKEN_URL"),
        oauth_client_id=read.raw("OAUTH_CLIENT_ID"),
        oauth_client_secret=read.secret("OAUTH_CLIENT_SECRET"),
        oauth_scope=read.raw("OAUTH_SCOPE"),
    )
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        if not security.sasl_username:
            raise ConfigError(f"{_PREFIX}SASL_USERNAME", f"required with {mechanism}")
        if not security.sasl_password:
            raise ConfigError(f"{_PREFIX}SASL_PASSWORD", f"required with {mechanism}")
    if mechanism == "OAUTHBEARER" and not (security.oauth_token_url and security.oauth_client_id):
        raise ConfigError(f"{_PREFIX}OAUTH_TOKEN_URL", "and _OAUTH_CLIENT_ID required")
    tls_files = security.ssl_certificate_location, security.ssl_key_location
    if any(tls_files) and not all(tls_files):
        raise ConfigError(f"{_PREFIX}SSL_KEY_LOCATION", "a client certificate needs its key")
    if (security.ssl_ca_location or any(tls_files)) and not protocol.endswith("SSL"):
        raise ConfigError(f"{_PREFIX}SECURITY_PROTOCOL", "TLS files given: use SSL or SASL_SSL")
    return security


class KafkaSettings(Protocol):
    """What a Kafka client needs of the settings (:class:`~mailbus.kernel.settings.Settings`)."""

    @property
    def kafka_bootstrap(self) -> str: ...

    @property
    def kafka_security(self) -> KafkaSecurity: ...


def kafka_client_config(settings: KafkaSettings) -> dict[str, str | int | float | bool]:
    """``bootstrap.servers`` plus the TLS/SASL keys; each client adds its own keys."""
    security = settings.kafka_security
    config: dict[str, str | int | float | bool] = {"bootstrap.servers": settings.kafka_bootstrap}
    if security.protocol == "PLAINTEXT":
        return config
    config["security.protocol"] = security.protocol
    optional = {
        "sasl.mechanism": security.sasl_mechanism,
        "sasl.username": security.sasl_username,
        "sasl.password": security.sasl_password,
        "ssl.ca.location": security.ssl_ca_location,
        "ssl.certificate.location": security.ssl_certificate_location,
        "ssl.key.location": security.ssl_key_location,
        "ssl.key.password": security.ssl_key_password,
    }
    if security.sasl_mechanism == "OAUTHBEARER":
        optional.update(
            {
                "sasl.username": None,
                "sasl.password": None,
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.token.endpoint.url": security.oauth_token_url,
                "sasl.oauthbearer.client.id": security.oauth_client_id,
                "sasl.oauthbearer.client.secret": security.oauth_client_secret,
                "sasl.oauthbearer.scope": security.oauth_scope,
            }
        )
    config.update({key: value for key, value in optional.items() if value})
    return config


class _Env:
    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env

    def raw(self, suffix: str) -> str | None:
        value = self._env.get(_PREFIX + suffix)
        return value.strip() if value and value.strip() else None

    def secret(self, suffix: str) -> str:
        path = self.raw(f"{suffix}_FILE")
        if path:
            try:
                return Path(path).read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"{_PREFIX}{suffix}_FILE", f"cannot read: {exc.strerror}"
                ) from None
        return self.raw(suffix) or ""

    def file(self, suffix: str) -> str | None:
        path = self.raw(suffix)
        if path is not None and not Path(path).is_file():
            raise ConfigError(_PREFIX + suffix, f"no such file: {path}")
        return path
