"""mailbus_client imports only the standard library, psycopg and itself (and OpenTelemetry
where the service has it): what a domain service installs stays slim (tests/packaging
proves it in a fresh venv, this without one)."""

from __future__ import annotations

import ast
import sys

from services import REPO

ALLOWED = set(sys.stdlib_module_names) | {"psycopg", "mailbus_client"}
# imported where present, never required: the caller's OpenTelemetry span context
OPTIONAL = {"trace_context.py": {"opentelemetry"}}


def imported(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_client_imports_nothing_of_the_services() -> None:
    modules = sorted((REPO / "client" / "mailbus_client").glob("*.py"))
    assert len(modules) >= 6
    for path in modules:
        assert imported(path.read_text()) <= ALLOWED | OPTIONAL.get(path.name, set()), path.name


def test_the_check_sees_a_service_import() -> None:
    assert imported("from mailbus.kernel.errors import ConfigError\nimport confluent_kafka") == {
        "mailbus",
        "confluent_kafka",
    }
