"""The recipes of client/README.md: the client inside a SQLAlchemy or a Django transaction,
on that framework's own psycopg connection. Skipped where the framework is not installed
(`make test-client` installs both into the client's venv)."""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg
import pytest

from mailbus_client import Client, SendRequest


def keys(database_url: str) -> list[str]:
    with psycopg.connect(database_url) as conn:
        return [r[0] for r in conn.execute("SELECT dedupe_key FROM email_sends ORDER BY id")]


def make_orders(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, state text)")
        conn.execute("INSERT INTO orders VALUES (1042, 'paid'), (1043, 'paid')")


def test_sqlalchemy_engine_and_session(database_url: str) -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import Session

    make_orders(database_url)
    engine = sqlalchemy.create_engine(
        database_url.replace("postgresql://", "postgresql+psycopg://")
    )
    client = Client()
    ship = sqlalchemy.text("UPDATE orders SET state = 'shipped' WHERE id = :id")
    with engine.begin() as conn:  # commits both, or neither
        conn.execute(ship, {"id": 1042})
        client.enqueue(
            conn.connection.driver_connection,
            SendRequest("order-1042-shipped", "ana@example.com", "order_shipped"),
        )
    with pytest.raises(RuntimeError), Session(engine) as session, session.begin():
        session.execute(ship, {"id": 1043})
        client.enqueue(
            session.connection().connection.driver_connection,
            SendRequest("order-1043-shipped", "bo@example.com", "order_shipped"),
        )
        raise RuntimeError("the business change failed: neither is written")
    engine.dispose()
    assert keys(database_url) == ["order-1042-shipped"]


def test_django_atomic(database_url: str) -> None:
    pytest.importorskip("django")
    from django.conf import settings

    make_orders(database_url)
    url = urlsplit(database_url)
    settings.configure(
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": url.path.lstrip("/"),
                "USER": url.username,
                "PASSWORD": url.password,
                "HOST": url.hostname,
                "PORT": url.port or 5432,
            }
        },
        USE_TZ=True,
    )
    import django
    from django.db import connection, transaction

    django.setup()
    client = Client()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("UPDATE orders SET state = 'shipped' WHERE id = %s", [1042])
        client.enqueue(
            connection.connection,
            SendRequest("order-1042-shipped", "ana@example.com", "order_shipped"),
        )
    with pytest.raises(RuntimeError), transaction.atomic():
        client.enqueue(
            connection.connection,
            SendRequest("order-1043-shipped", "bo@example.com", "order_shipped"),
        )
        raise RuntimeError("the business change failed: neither is written")
    connection.close()
    assert keys(database_url) == ["order-1042-shipped"]
