"""MAILBUS_KAFKA_* TLS/SASL settings → librdkafka keys, in kafka_client_config alone."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.kafka_security import kafka_client_config
from mailbus.kernel.settings import load_settings

BOOTSTRAP = "broker-1:9093,broker-2:9093"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA and a client certificate + key (PEM), made with openssl."""
    where = tmp_path_factory.mktemp("pki")
    ca, key = where / "ca.pem", where / "client.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=test-ca", "-keyout", str(key), "-out", str(ca)],
        check=True, capture_output=True,
    )  # fmt: skip
    return {"ca": ca, "cert": ca, "key": key}


def config(env: dict[str, str]) -> dict[str, str | int | float | bool]:
    return kafka_client_config(load_settings({"MAILBUS_KAFKA_BOOTSTRAP": BOOTSTRAP, **env}))


def test_plaintext_by_default() -> None:
    assert config({}) == {"bootstrap.servers": BOOTSTRAP}


def test_sasl_ssl_with_scram(pki: dict[str, Path], tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("s3cret-from-a-file\n")
    assert config(
        {
            "MAILBUS_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
            "MAILBUS_KAFKA_SASL_MECHANISM": "scram-sha-512",
            "MAILBUS_KAFKA_SASL_USERNAME": "mailbus-relay",
            "MAILBUS_KAFKA_SASL_PASSWORD_FILE": str(password),
            "MAILBUS_KAFKA_SSL_CA_LOCATION": str(pki["ca"]),
        }
    ) == {
        "bootstrap.servers": BOOTSTRAP,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "mailbus-relay",
        "sasl.password": "s3cret-from-a-file",
        "ssl.ca.location": str(pki["ca"]),
    }


def test_mutual_tls(pki: dict[str, Path]) -> None:
    assert config(
        {
            "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SSL",
            "MAILBUS_KAFKA_SSL_CA_LOCATION": str(pki["ca"]),
            "MAILBUS_KAFKA_SSL_CERTIFICATE_LOCATION": str(pki["cert"]),
            "MAILBUS_KAFKA_SSL_KEY_LOCATION": str(pki["key"]),
        }
    ) == {
        "bootstrap.servers": BOOTSTRAP,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki["ca"]),
        "ssl.certificate.location": str(pki["cert"]),
        "ssl.key.location": str(pki["key"]),
    }


def test_sasl_plain_without_tls() -> None:
    assert (
        config(
            {
                "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "MAILBUS_KAFKA_SASL_MECHANISM": "PLAIN",
                "MAILBUS_KAFKA_SASL_USERNAME": "u",
                "MAILBUS_KAFKA_SASL_PASSWORD": "p",
            }
        )["sasl.mechanism"]
        == "PLAIN"
    )


def test_oauthbearer_oidc() -> None:
    got = config(
        {
            "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "MAILBUS_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
            "MAILBUS_KAFKA_OAUTH_TOKEN_URL": "https://idp.example.com/token",
            "MAILBUS_KAFKA_OAUTH_CLIENT_ID": "mailbus",
            "MAILBUS_KAFKA_OAUTH_CLIENT_SECRET": "client-secret",
            "MAILBUS_KAFKA_OAUTH_SCOPE": "kafka",
        }
    )
    assert got["sasl.oauthbearer.method"] == "oidc"
    assert got["sasl.oauthbearer.token.endpoint.url"] == "https://idp.example.com/token"
    assert got["sasl.oauthbearer.client.secret"] == "client-secret"
    assert "sasl.username" not in got


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"MAILBUS_KAFKA_SECURITY_PROTOCOL": "TLS"}, "MAILBUS_KAFKA_SECURITY_PROTOCOL"),
        ({"MAILBUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "MAILBUS_KAFKA_SASL_MECHANISM"),
        (
            {
                "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "MAILBUS_KAFKA_SASL_MECHANISM": "GSSAPI",
            },
            "MAILBUS_KAFKA_SASL_MECHANISM",
        ),
        ({"MAILBUS_KAFKA_SASL_MECHANISM": "PLAIN"}, "MAILBUS_KAFKA_SASL_MECHANISM"),
        (
            {
                "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "MAILBUS_KAFKA_SASL_MECHANISM": "PLAIN",
            },
            "MAILBUS_KAFKA_SASL_USERNAME",
        ),
        (
            {
                "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "MAILBUS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
                "MAILBUS_KAFKA_SASL_USERNAME": "u",
            },
            "MAILBUS_KAFKA_SASL_PASSWORD",
        ),
        (
            {
                "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "MAILBUS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
                "MAILBUS_KAFKA_SASL_USERNAME": "u",
                "MAILBUS_KAFKA_SASL_PASSWORD_FILE": "/nonexistent/password",
            },
            "MAILBUS_KAFKA_SASL_PASSWORD_FILE",
        ),
        (
            {"MAILBUS_KAFKA_SECURITY_PROTOCOL": "SSL", "MAILBUS_KAFKA_SSL_CA_LOCATION": "/no/ca"},
            "MAILBUS_KAFKA_SSL_CA_LOCATION",
        ),
        (
            {
                "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "MAILBUS_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
            },
            "MAILBUS_KAFKA_OAUTH_TOKEN_URL",
        ),
    ],
)
def test_inconsistent_settings_name_the_variable(env: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as error:
        config(env)
    assert error.value.setting == setting


def test_tls_files_need_a_tls_protocol(pki: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match="SECURITY_PROTOCOL"):
        config({"MAILBUS_KAFKA_SSL_CA_LOCATION": str(pki["ca"])})
    with pytest.raises(ConfigError, match="SSL_KEY_LOCATION"):
        config(
            {
                "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SSL",
                "MAILBUS_KAFKA_SSL_CERTIFICATE_LOCATION": str(pki["cert"]),
            }
        )


def test_passwords_stay_out_of_reprs() -> None:
    settings = load_settings(
        {
            "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "MAILBUS_KAFKA_SASL_MECHANISM": "PLAIN",
            "MAILBUS_KAFKA_SASL_USERNAME": "u",
            "MAILBUS_KAFKA_SASL_PASSWORD": "very-secret-password",
        }
    )
    assert "very-secret-password" not in repr(settings.kafka_security)
    assert "very-secret-password" in settings.kafka_security.secrets


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_librdkafka_accepts_every_key(mechanism: str, pki: dict[str, Path]) -> None:
    """confluent-kafka checks names and values when a client is made (no broker needed)."""
    env = {
        "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "MAILBUS_KAFKA_SASL_MECHANISM": mechanism,
        "MAILBUS_KAFKA_SASL_USERNAME": "u",
        "MAILBUS_KAFKA_SASL_PASSWORD": "p",
        "MAILBUS_KAFKA_SSL_CA_LOCATION": str(pki["ca"]),
        "MAILBUS_KAFKA_SSL_CERTIFICATE_LOCATION": str(pki["cert"]),
        "MAILBUS_KAFKA_SSL_KEY_LOCATION": str(pki["key"]),
        "MAILBUS_KAFKA_OAUTH_TOKEN_URL": "https://idp.example.com/token",
        "MAILBUS_KAFKA_OAUTH_CLIENT_ID": "mailbus",
        "MAILBUS_KAFKA_OAUTH_CLIENT_SECRET": "s",
    }
    producer = Producer(config(env))
    producer.flush(0)


def test_librdkafka_refuses_a_bad_file(pki: dict[str, Path]) -> None:
    """The check above means something: a key file given as CA fails at construction.
    (Not with OAUTHBEARER: librdkafka 2.x aborts on a failed OIDC client construction.)"""
    env = {
        "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "MAILBUS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "MAILBUS_KAFKA_SASL_USERNAME": "u",
        "MAILBUS_KAFKA_SASL_PASSWORD": "p",
        "MAILBUS_KAFKA_SSL_CA_LOCATION": str(pki["key"]),
    }
    with pytest.raises(KafkaException, match=r"ssl\.ca\.location"):
        Producer(config(env))
