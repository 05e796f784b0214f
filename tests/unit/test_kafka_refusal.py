"""What a refused start-up looks like (mailbus.app.kafka_probe), and the intake's faust form of
the TLS/SASL settings (intake.app.broker_credentials)."""

from __future__ import annotations

import faust
import pytest
from confluent_kafka import KafkaError
from faust.types.auth import AuthProtocol, SASLMechanism

from mailbus.app.kafka_probe import check_kafka_access, refusal
from mailbus.intake.app import broker_credentials
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.kafka_security import KafkaSecurity
from mailbus.kernel.settings import load_settings

SCRAM = KafkaSecurity("SASL_SSL", "SCRAM-SHA-512", "svc", "hunter2")
TLS = KafkaSecurity("SSL", ssl_ca_location="/etc/ssl/certs/ca-certificates.crt")


def error(code: int, text: str) -> KafkaError:
    return KafkaError(code, text)


def test_refused_credentials_name_the_password_setting() -> None:
    found = refusal(
        SCRAM,
        [
            error(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"),
            error(
                KafkaError._AUTHENTICATION,
                "sasl_ssl://b:9095/bootstrap: SASL authentication error: invalid credentials",
            ),
        ],
    )
    assert isinstance(found, ConfigError)
    assert found.setting == "MAILBUS_KAFKA_SASL_PASSWORD"
    assert found.problem == (
        "the broker refused the credentials of 'svc' (SCRAM-SHA-512):"
        " SASL authentication error: invalid credentials"
    )
    assert "hunter2" not in str(found)


def test_an_unverifiable_certificate_names_the_ca_setting() -> None:
    text = "ssl://b:9094/bootstrap: error:0A000086:SSL routines::certificate verify failed"
    for code in (KafkaError._TRANSPORT, KafkaError._SSL):
        found = refusal(TLS, [error(code, text)])
        assert isinstance(found, ConfigError)
        assert found.setting == "MAILBUS_KAFKA_SSL_CA_LOCATION"
        assert "/etc/ssl/certs/ca-certificates.crt" in found.problem


def test_another_tls_failure_names_the_protocol() -> None:
    found = refusal(TLS, [error(KafkaError._SSL, "ssl://b:9092/bootstrap: wrong version number")])
    assert isinstance(found, ConfigError)
    assert found.setting == "MAILBUS_KAFKA_SECURITY_PROTOCOL"


def test_an_unreachable_broker_is_no_refusal() -> None:
    down = [
        error(KafkaError._TRANSPORT, "ssl://b:9094/bootstrap: Connect failed: Connection refused"),
        error(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"),
    ]
    assert refusal(TLS, down) is None


def test_the_check_returns_when_no_broker_answers() -> None:
    settings = load_settings(
        {"MAILBUS_KAFKA_BOOTSTRAP": "127.0.0.1:1", "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SSL"}
    )
    check_kafka_access(settings, wait=2.0)  # the caller's retries take it from here


def test_intake_credentials_for_sasl_ssl() -> None:
    credentials = broker_credentials(SCRAM)
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.mechanism == SASLMechanism.SCRAM_SHA_512
    assert (credentials.username, credentials.password) == ("svc", "hunter2")
    assert credentials.protocol == AuthProtocol.SASL_SSL
    assert credentials.ssl_context is not None and credentials.ssl_context.check_hostname


def test_intake_credentials_for_tls_and_plaintext() -> None:
    credentials = broker_credentials(TLS)
    assert isinstance(credentials, faust.SSLCredentials)
    assert credentials.protocol == AuthProtocol.SSL
    assert broker_credentials(KafkaSecurity()) is None


def test_intake_refuses_oauthbearer_naming_the_mechanism() -> None:
    oauth = KafkaSecurity(
        "SASL_SSL", "OAUTHBEARER", oauth_token_url="https://idp/token", oauth_client_id="c"
    )
    with pytest.raises(ConfigError, match="MAILBUS_KAFKA_SASL_MECHANISM: OAUTHBEARER is not"):
        broker_credentials(oauth)
