"""A migration that adds a table or view grants it, in the same file, to every group role
that schemas/sql/roles/grants.sql grants it to (issue 35, review 2026-12-06 hole 10): a
database upgraded by a plain `mailbus migrate`, whose grants were set before, must not deny
the new build's processes. Tables added before 0054 are granted by 0054."""

from __future__ import annotations

import re
from pathlib import Path

from mailbus.app.migrate import available_migrations

REPO = Path(__file__).resolve().parents[2]
ROLES_SINCE = 14  # the group roles came with 0013's release
CATCH_UP = 54  # grants the tables added between ROLES_SINCE and it
_GRANT = re.compile(r"GRANT\s+(.+?)\s+ON\s+(.+?)\s+TO\s+([\w\s,]+?);", re.DOTALL | re.IGNORECASE)
_CREATES = re.compile(
    r"CREATE\s+(?:TABLE|(?:OR\s+REPLACE\s+)?VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.IGNORECASE
)


def _code(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


def grants(sql: str) -> set[tuple[str, str]]:
    """(object, role) pairs granted something; ``*`` for ALL TABLES IN SCHEMA."""
    found = set()
    for _, objects, roles in _GRANT.findall(_code(sql)):
        if re.match(r"SCHEMA\s", objects.strip(), re.IGNORECASE):
            continue
        names = ["*"] if objects.strip().upper().startswith("ALL TABLES") else objects.split(",")
        found |= {(n.strip(), r.strip()) for n in names for r in roles.split(",")}
    return found


def test_every_added_table_is_granted_in_its_own_migration() -> None:
    wanted = grants((REPO / "schemas/sql/roles/grants.sql").read_text())
    migrations = {m.version: m for m in available_migrations()}
    missing = []
    for version, migration in migrations.items():
        if version < ROLES_SINCE:
            continue
        granted = grants(migration.sql)
        if version < CATCH_UP and CATCH_UP in migrations:
            granted |= grants(migrations[CATCH_UP].sql)
        for table in _CREATES.findall(_code(migration.sql)):
            for obj, role in wanted:
                if obj in (table, "*") and (table, role) not in granted:
                    missing.append(f"{migration.label}: {table} to {role}")
    assert missing == []
