"""Fixtures: real PostgreSQL (a database per test, cloned from a migrated template) and
real Kafka (topics under a prefix of their own per test)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.admin import AdminClient
from pgbouncer import PgBouncer, running_pgbouncer
from services import StackServices, database_url_for, find_services

from mailbus.app.migrate import apply_migrations
from mailbus.app.scratch_database import drop_database
from mailbus.kernel.settings import Settings, load_settings
from mailbus.kernel.topics import ensure_topics


@pytest.fixture(scope="session")
def services() -> Iterator[StackServices]:
    with ExitStack() as cleanup:
        yield find_services(cleanup)


@pytest.fixture(scope="session")
def template_database(services: StackServices) -> Iterator[str]:
    name = f"mailbus_template_{os.getpid()}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    apply_migrations(database_url_for(services.database_url, name))
    yield name
    drop_database(services.database_url, name)


@pytest.fixture
def database_url(services: StackServices, template_database: str) -> Iterator[str]:
    name = f"mailbus_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    yield database_url_for(services.database_url, name)
    drop_database(services.database_url, name)


@pytest.fixture
def pgbouncer(database_url: str, tmp_path: Path) -> Iterator[PgBouncer]:
    """A transaction-pooling PgBouncer in front of this test's database (tests/pgbouncer.py)."""
    with running_pgbouncer(database_url, tmp_path) as bouncer:
        yield bouncer


@pytest.fixture
def settings(services: StackServices, database_url: str, topic_prefixes: list[str]) -> Settings:
    """Settings pointing at this test's database and a topic prefix of its own."""
    base = load_settings({})
    configured = replace(
        base,
        database_url=database_url,
        kafka_bootstrap=services.kafka_bootstrap,
        topic_prefix=f"test-{uuid.uuid4().hex[:10]}",
        partitions=3,
    )
    topic_prefixes.append(configured.topic_prefix)
    ensure_topics(configured)
    return configured


@pytest.fixture(scope="session")
def topic_prefixes(services: StackServices) -> Iterator[list[str]]:
    """The topic prefixes this session's tests used; their topics (the tests' own, their
    consumer groups' and faust's) are deleted at the end. A broker keeps a file open per
    partition and a full run makes about 2,500 partitions: the local broker reached its
    limit of open files (20,000) after several runs and stopped accepting connections."""
    prefixes: list[str] = []
    yield prefixes
    admin = AdminClient({"bootstrap.servers": services.kafka_bootstrap})
    names = [
        name for name in admin.list_topics(timeout=10).topics if name.startswith(tuple(prefixes))
    ]
    for future in admin.delete_topics(names, operation_timeout=30).values() if names else ():
        future.result(timeout=60)
