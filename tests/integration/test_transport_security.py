"""TLS and SASL against the local stack's real broker and PostgreSQL: every mechanism the
SASL_SSL listener offers and the TLS-only listener work; a wrong password or CA stops a
command at start-up with exit status 2 naming the setting; PostgreSQL verify-full."""

from __future__ import annotations

import psycopg
import pytest
from services import run_mailbus, settings_env
from transport_security import WRONG_CA, StackSecurity, stack_security

from mailbus.kernel.settings import Settings

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def security() -> StackSecurity:
    return stack_security()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_each_sasl_mechanism_creates_topics_over_sasl_ssl(
    settings: Settings, security: StackSecurity, mechanism: str
) -> None:
    env = settings_env(settings, **security.sasl_env(mechanism))
    done = run_mailbus("migrate", env=env)
    assert done.returncode == 0, done.stderr
    assert "topics: created nothing (all exist)" in done.stdout  # the admin client got in


def test_tls_listener_without_sasl(settings: Settings, security: StackSecurity) -> None:
    done = run_mailbus("migrate", env=settings_env(settings, **security.ssl_env()))
    assert done.returncode == 0, done.stderr
    assert "topics: created nothing (all exist)" in done.stdout


@pytest.mark.parametrize("command", ["relay", "consume", "intake", "migrate"])
def test_a_wrong_password_stops_the_command_at_start_up(
    settings: Settings, security: StackSecurity, command: str
) -> None:
    env = settings_env(settings, **security.sasl_env(MAILBUS_KAFKA_SASL_PASSWORD="wrong"))
    done = run_mailbus(command, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "configuration error: MAILBUS_KAFKA_SASL_PASSWORD" in done.stderr
    assert "refused the credentials of 'mailbus'" in done.stderr
    assert "wrong" not in done.stderr  # the password is not printed


@pytest.mark.parametrize("listener", ["ssl", "sasl_ssl"])
def test_a_wrong_ca_stops_the_command_at_start_up(
    settings: Settings, security: StackSecurity, listener: str
) -> None:
    changes = {"MAILBUS_KAFKA_SSL_CA_LOCATION": WRONG_CA}
    kafka = security.ssl_env(**changes) if listener == "ssl" else security.sasl_env(**changes)
    done = run_mailbus("relay", env=settings_env(settings, **kafka), timeout=60)
    assert done.returncode == 2, done.stderr
    assert "configuration error: MAILBUS_KAFKA_SSL_CA_LOCATION" in done.stderr
    assert "certificate verify failed" in done.stderr


def test_postgres_verify_full_with_the_stacks_ca(
    database_url: str, security: StackSecurity
) -> None:
    with psycopg.connect(security.verify_full(database_url)) as conn:
        [(ssl, version)] = conn.execute(
            "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        ).fetchall()
    assert ssl is True
    assert version.startswith("TLSv1.")


def test_postgres_verify_full_with_a_wrong_ca_is_refused(
    database_url: str, security: StackSecurity
) -> None:
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        psycopg.connect(security.verify_full(database_url, ca=WRONG_CA)).close()


def test_migrate_over_verify_full_and_sasl_ssl(
    settings: Settings, database_url: str, security: StackSecurity
) -> None:
    env = settings_env(
        settings,
        MAILBUS_DATABASE_URL=security.verify_full(database_url),
        **security.sasl_env(),
    )
    done = run_mailbus("migrate", "--roles", env=env)
    assert done.returncode == 0, done.stderr
