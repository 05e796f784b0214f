"""mailbus in a schema of its own (MAILBUS_DB_SCHEMA; issue 36 item 3), on the real
PostgreSQL: a fresh install leaves ``public`` as it found it, every role is refused on a
table there, an install from before the schema is moved into it by migration 0072 and ends
as a fresh install would. The schema is ``mb_x`` throughout: the local stack's login is
``mailbus``, whose default ``"$user", public`` path would find a schema named ``mailbus``
by itself and prove nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.errors import InsufficientPrivilege
from services import StackServices, database_url_for, run_mailbus
from transport_security import login_as

from mailbus.app.migrate import ROLES, apply_migrations, apply_roles, schema_state
from mailbus.app.migrate_waits import LockWait
from mailbus.app.scratch_database import drop_database, schema_as_of
from mailbus.kernel.db_schema import with_search_path
from mailbus.kernel.errors import ConfigError, StorageError
from mailbus_client import Client, SendRequest

SCHEMA = "mb_x"
# what public holds: relations, functions, types, extensions and its own grants
_PUBLIC = """
SELECT 'relation', c.relname, c.relkind::text, coalesce(c.relacl::text, '')
FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace
UNION ALL SELECT 'function', p.oid::regprocedure::text, '', coalesce(p.proacl::text, '')
FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace
UNION ALL SELECT 'type', t.typname, t.typtype::text, ''
FROM pg_type t WHERE t.typnamespace = 'public'::regnamespace
UNION ALL SELECT 'schema', n.nspname, '', coalesce(n.nspacl::text, '')
FROM pg_namespace n WHERE n.nspname = 'public'
UNION ALL SELECT 'extension', e.extname, '', ''
FROM pg_extension e WHERE e.extnamespace = 'public'::regnamespace
ORDER BY 1, 2
"""
# what mailbus's schema holds, but an extension's own objects
_SCHEMA_OBJECTS = """
SELECT 'relation', c.relname, c.relkind::text,
       coalesce(pg_get_indexdef(c.oid), pg_get_viewdef(c.oid), '')
FROM pg_class c WHERE c.relnamespace = %(schema)s::regnamespace
  AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')
UNION ALL SELECT 'column', c.relname || '.' || a.attname, format_type(a.atttypid, a.atttypmod),
       coalesce(pg_get_expr(ad.adbin, ad.adrelid), '')
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
WHERE c.relnamespace = %(schema)s::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
  AND c.relkind IN ('r', 'v')
UNION ALL SELECT 'trigger', t.tgname, t.tgrelid::regclass::text, pg_get_triggerdef(t.oid)
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relnamespace = %(schema)s::regnamespace AND NOT t.tgisinternal
UNION ALL SELECT 'function', p.oid::regprocedure::text, array_to_string(p.proconfig, ';'),
       p.prosecdef::text
FROM pg_proc p WHERE p.pronamespace = %(schema)s::regnamespace
  AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
ORDER BY 1, 2
"""


@pytest.fixture
def scratch(services: StackServices) -> Iterator[str]:
    """A database of its own, never migrated."""
    name = f"mailbus_schema_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield database_url_for(services.database_url, name)
    drop_database(services.database_url, name)


def _rows(url: str, query: str, **params: Any) -> list[tuple[Any, ...]]:
    """``query``'s rows, read on the path of a mailbus process (the schema, then public)."""
    with psycopg.connect(with_search_path(url, SCHEMA)) as conn:
        return conn.execute(query, params).fetchall()


def _migrate(url: str, *args: str) -> None:
    done = run_mailbus(
        "migrate",
        *args,
        "--skip-topics",
        env={"MAILBUS_DATABASE_URL": url, "MAILBUS_DB_SCHEMA": SCHEMA},
    )
    assert done.returncode == 0, done.stderr


def test_a_fresh_install_leaves_public_as_it_found_it(scratch: str) -> None:
    before = _rows(scratch, _PUBLIC)
    _migrate(scratch, "--roles")
    assert _rows(scratch, _PUBLIC) == before
    tables = _rows(scratch, "SELECT count(*) FROM pg_tables WHERE schemaname = %(s)s", s=SCHEMA)
    assert tables[0][0] >= 20  # email_sends and the rest, the migration table among them
    status = run_mailbus(
        "migrate", "--status", env={"MAILBUS_DATABASE_URL": scratch, "MAILBUS_DB_SCHEMA": SCHEMA}
    )
    assert status.returncode == 0 and "pending: nothing" in status.stdout, status


def test_every_function_runs_with_the_schemas_path(scratch: str) -> None:
    """Trigger functions too: they fire under the writer's path, an application's."""
    apply_migrations(scratch, schema=SCHEMA)
    functions = _rows(scratch, _SCHEMA_OBJECTS, schema=SCHEMA)
    configs = {config for kind, _, config, _ in functions if kind == "function"}
    assert configs == {f"search_path={SCHEMA}, pg_temp"}


def test_every_role_is_refused_on_a_table_outside_the_schema(scratch: str) -> None:
    apply_migrations(scratch, schema=SCHEMA)
    apply_roles(scratch, SCHEMA)
    with psycopg.connect(scratch) as conn:
        conn.execute("CREATE TABLE public.orders (id int PRIMARY KEY, secret text)")
        conn.execute("INSERT INTO public.orders VALUES (1, 'the business')")
    for role in ROLES:
        with login_as(scratch, role, SCHEMA) as url:
            for statement in (
                "SELECT * FROM public.orders",
                "INSERT INTO public.orders VALUES (2, 'x')",
                "UPDATE public.orders SET secret = 'y'",
                "DELETE FROM public.orders",
                "CREATE TABLE public.mine (id int)",
            ):
                with psycopg.connect(url) as conn, pytest.raises(InsufficientPrivilege):
                    conn.execute(statement)
            with psycopg.connect(url) as conn:  # and its own schema is where it looks
                assert conn.execute("SELECT current_schema()").fetchone() == (SCHEMA,)


def test_the_client_enqueues_from_a_connection_that_knows_no_mailbus_schema(
    scratch: str,
) -> None:
    """The application's connection: its path is public alone; the client names the
    schema, and the triggers the insert fires find their tables by their own path."""
    apply_migrations(scratch, schema=SCHEMA)
    apply_roles(scratch, SCHEMA)
    with login_as(scratch, "mailbus_enqueuer", SCHEMA) as url:
        app_url = url.split("?", 1)[0] + "?options=-csearch_path%3Dpublic"
        with psycopg.connect(app_url) as conn:
            assert conn.execute("SHOW search_path").fetchone() == ("public",)
            client = Client(schema=SCHEMA)
            sent = client.enqueue(conn, SendRequest("k-app", "a@x.org", "welcome"))
            many = client.enqueue_many(conn, [SendRequest("k-2", "b@x.org", "welcome")])
            status = client.status(conn, "k-app")
            cancelled = client.cancel(conn, "k-2")
    assert sent.created and many[0].created and cancelled
    assert status is not None and status.status == "pending"
    events = _rows(scratch, f"SELECT event FROM {SCHEMA}.email_send_events ORDER BY id")
    assert events  # the outcome-event trigger fired and wrote in mailbus's schema


def test_a_process_login_finds_the_schema_without_startup_options(scratch: str) -> None:
    """Through PgBouncer no startup option arrives: `migrate --roles` sets the schema's
    path on each login of a process role (a group's own setting is not inherited)."""
    apply_migrations(scratch, schema=SCHEMA)
    with login_as(scratch, "mailbus_relay", SCHEMA) as url:
        bare = url.split("?", 1)[0]
        with psycopg.connect(bare) as conn:
            assert conn.execute("SELECT current_schema()").fetchone() != (SCHEMA,)
        apply_roles(scratch, SCHEMA)
        with psycopg.connect(bare) as conn:
            assert conn.execute("SHOW search_path").fetchone() == (f"{SCHEMA}, public",)
            assert conn.execute("SELECT count(*) > 0 FROM mailbus_schema_migrations").fetchone()


def test_roles_again_writes_no_login_setting_it_finds_set(scratch: str) -> None:
    """Each write of a login's setting races with a DROP ROLE of that login elsewhere in the
    cluster ("tuple concurrently deleted"): a run of `--roles` writes only what is missing."""
    apply_migrations(scratch, schema=SCHEMA)
    setting = (
        "SELECT s.xmin::text FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole"
        " WHERE r.rolname = %s AND s.setdatabase = (SELECT oid FROM pg_database"
        " WHERE datname = current_database())"
    )
    with login_as(scratch, "mailbus_relay", SCHEMA) as url:
        login = url.split("://", 1)[1].split(":", 1)[0]
        apply_roles(scratch, SCHEMA)
        with psycopg.connect(scratch) as conn:
            first = conn.execute(setting, (login,)).fetchall()
        apply_roles(scratch, SCHEMA)
        with psycopg.connect(scratch) as conn:
            assert conn.execute(setting, (login,)).fetchall() == first != []


def test_an_install_in_public_is_moved_and_ends_as_a_fresh_one(
    services: StackServices, scratch: str
) -> None:
    """0072 names what it moves: a table, view or function a future migration adds and
    the list forgets stays behind in public, and this fails."""
    schema_as_of(scratch, 71)  # the last release before the schema, in public
    with psycopg.connect(scratch) as conn:
        conn.execute(
            "INSERT INTO public.email_sends (dedupe_key, to_address, template)"
            " VALUES ('kept', 'a@x.org', 't')"
        )
        conn.execute("CREATE TABLE public.orders (id int)")
    state = schema_state(scratch, schema=SCHEMA)
    assert state.database_version == 71 and state.pending[0].version == 72
    _migrate(scratch, "--roles")
    left = _rows(
        scratch,
        "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace"
        " UNION ALL SELECT p.proname FROM pg_proc p"
        " WHERE p.pronamespace = 'public'::regnamespace AND NOT EXISTS"
        " (SELECT FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')",
    )
    assert left == [("orders",)]
    assert _rows(scratch, f"SELECT dedupe_key FROM {SCHEMA}.email_sends") == [("kept",)]
    fresh = f"mailbus_fresh_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{fresh}"')
    try:
        fresh_url = database_url_for(services.database_url, fresh)
        apply_migrations(fresh_url, schema=SCHEMA)
        assert _rows(scratch, _SCHEMA_OBJECTS, schema=SCHEMA) == _rows(
            fresh_url, _SCHEMA_OBJECTS, schema=SCHEMA
        )
    finally:
        drop_database(services.database_url, fresh)


def test_a_schema_name_that_is_no_plain_identifier_exits_2(scratch: str) -> None:
    for bad in ("Mail-Bus", "public", "pg_mail", "1mailbus"):
        done = run_mailbus(
            "migrate",
            "--skip-topics",
            env={"MAILBUS_DATABASE_URL": scratch, "MAILBUS_DB_SCHEMA": bad},
        )
        assert done.returncode == 2 and "MAILBUS_DB_SCHEMA" in done.stderr, done
    assert _rows(scratch, "SELECT to_regnamespace('mb_x') IS NULL") == [(True,)]


def test_an_upgrade_stopped_before_the_move_leaves_no_function_on_an_unpinned_path(
    scratch: str,
) -> None:
    """The older migrations an install in public still lacks are applied there; their
    functions (SECURITY DEFINER ones among them) are created ``SET search_path FROM
    CURRENT``. Should 0072 then fail (its locks never free), the run stops with them as
    they are: each must keep pg_temp last, as releases before the schema pinned it, never
    searched first for the tables it names."""
    schema_as_of(scratch, 60)
    with psycopg.connect(scratch) as holder:
        holder.execute("LOCK TABLE public.webhook_tokens IN ACCESS SHARE MODE")
        with pytest.raises(StorageError):
            apply_migrations(scratch, schema=SCHEMA, wait=LockWait(max_wait_s=0))
    assert schema_state(scratch, schema=SCHEMA).database_version == 71
    configs = _rows(
        scratch,
        "SELECT p.oid::regprocedure::text, p.prosecdef, array_to_string(p.proconfig, ';')"
        " FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND NOT EXISTS"
        " (SELECT FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')",
    )
    definers = {config for _, definer, config in configs if definer}
    assert definers == {"search_path=public, pg_temp"}, configs
    assert not [name for name, _, config in configs if config == "search_path=public"]


def test_a_second_install_in_public_after_the_move_is_refused(scratch: str) -> None:
    """A release from before the schema finds no mailbus_schema_migrations on its path
    after the move and migrates an empty install into public (its migrate run again on a
    rollback, with a login not named like the schema): its processes and the applications'
    path of docs/upgrading.md then write sends there, which a later release, reading its
    schema alone, would never send. Every command of a later release refuses the database
    instead (exit 2), naming both."""
    schema_as_of(scratch, 71)  # an install from before the schema (pg_trgm in public)
    _migrate(scratch)  # moved
    schema_as_of(scratch, 71)  # what that release's migrate then leaves in public
    with pytest.raises(ConfigError, match="public"):
        schema_state(scratch, schema=SCHEMA)
    with pytest.raises(ConfigError, match="public"):
        apply_migrations(scratch, schema=SCHEMA)
    for args in (("migrate", "--skip-topics"), ("status",)):
        done = run_mailbus(
            *args, env={"MAILBUS_DATABASE_URL": scratch, "MAILBUS_DB_SCHEMA": SCHEMA}
        )
        assert done.returncode == 2 and "public.mailbus_schema_migrations" in done.stderr, done
