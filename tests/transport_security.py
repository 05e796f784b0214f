"""The local stack's TLS and SASL, for the transport-security and least-privilege tests.

`stack/local-stack.sh up` writes ``.stack/security.env`` (``$MAILBUS_STACK_DIR`` when
set): the SASL_SSL listener, its SCRAM/PLAIN user, the CA that signed the broker's and
PostgreSQL's certificate, and the TLS-only listener.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from services import REPO

from mailbus.kernel.db_schema import DEFAULT_SCHEMA, with_search_path
from mailbus.kernel.settings import load_env_file

__all__ = [
    "WRONG_CA",
    "StackSecurity",
    "login_as",
    "stack_security",
]

# A real CA bundle that did not sign the stack's certificate.
WRONG_CA = "/etc/ssl/certs/ca-certificates.crt"


class StackSecurity:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values
        self.ca = values["MAILBUS_KAFKA_SSL_CA_LOCATION"]
        self.sasl_bootstrap = values["MAILBUS_KAFKA_BOOTSTRAP"]
        self.ssl_bootstrap = values["MAILBUS_STACK_KAFKA_SSL_BOOTSTRAP"]

    def sasl_env(self, mechanism: str = "SCRAM-SHA-512", **changes: str) -> dict[str, str]:
        """The MAILBUS_KAFKA_* settings of a client of the SASL_SSL listener."""
        env = {k: v for k, v in self.values.items() if k.startswith("MAILBUS_KAFKA_")}
        env["MAILBUS_KAFKA_SASL_MECHANISM"] = mechanism
        return {**env, **changes}

    def ssl_env(self, **changes: str) -> dict[str, str]:
        """The MAILBUS_KAFKA_* settings of a client of the TLS-only listener."""
        return {
            "MAILBUS_KAFKA_BOOTSTRAP": self.ssl_bootstrap,
            "MAILBUS_KAFKA_SECURITY_PROTOCOL": "SSL",
            "MAILBUS_KAFKA_SSL_CA_LOCATION": self.ca,
            **changes,
        }

    def verify_full(self, database_url: str, ca: str | None = None) -> str:
        """``database_url`` over TLS, the server's certificate checked against ``ca``."""
        parts = urlsplit(database_url)
        query = f"sslmode=verify-full&sslrootcert={ca or self.ca}"
        return urlunsplit(parts._replace(query=query))


def stack_security() -> StackSecurity:
    stack_dir = Path(os.environ.get("MAILBUS_STACK_DIR") or REPO / ".stack")
    path = stack_dir / "security.env"
    if not path.is_file():
        pytest.fail(f"no {path}: run `make stack-up` (it writes the stack's TLS/SASL settings)")
    values: dict[str, str] = {}
    load_env_file(path, values)
    return StackSecurity(values)


@contextmanager
def login_as(database_url: str, group: str, schema: str = DEFAULT_SCHEMA) -> Iterator[str]:
    """A login role of its own in ``group``; yields ``database_url`` logging in as it, with
    mailbus's search_path in its options as every process connects (Settings.database_url)."""
    name = f"test_{group}_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE {group}")
    parts = urlsplit(database_url)
    netloc = f"{name}:{password}@{parts.hostname}:{parts.port or 5432}"
    try:
        yield with_search_path(urlunsplit(parts._replace(netloc=netloc)), schema)
    finally:
        drop_role(database_url, name)


def drop_role(database_url: str, name: str) -> None:
    """DROP ROLE, tried again while another test's `migrate --roles` is setting the same
    login's search_path in its own database ("tuple concurrently updated/deleted")."""
    for attempt in range(10):
        try:
            with psycopg.connect(database_url, autocommit=True) as admin:
                admin.execute(f"DROP ROLE {name}")
            return
        except psycopg.errors.InternalError_:
            if attempt == 9:
                raise
            time.sleep(0.1)
