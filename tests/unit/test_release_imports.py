"""A release imports nothing of the sandbox (docs/installation.md#the-sandbox): the wheel
leaves out ``mailbus.sandbox``, the imitations' kit ``mailbus.providers.sandbox`` and each
provider folder's ``sandbox/`` (tests/packaging/test_slim_client.py), so no module it ships
may reach one, directly or through others. The one way in is ``mailbus sandbox``, whose
import the app makes only where ``find_spec`` finds the sandbox: a checkout."""

from __future__ import annotations

import grimp

GUARDED = ("mailbus.app.cli", "mailbus.sandbox.server")  # behind find_spec (mailbus/app/cli.py)


def _sandbox_only(module: str) -> bool:
    return "sandbox" in module.split(".")


def test_no_module_of_a_release_reaches_the_sandbox() -> None:
    graph = grimp.build_graph("mailbus", "mailbus_client")
    importer, imported = GUARDED
    assert imported in graph.find_modules_directly_imported_by(importer)  # still guarded
    graph.remove_import(importer=importer, imported=imported)
    sandbox = {m for m in graph.modules if _sandbox_only(m)}
    assert "mailbus.providers.postmark.sandbox" in sandbox  # the walk sees the imitations
    reached = {
        module: sorted(graph.find_upstream_modules(module) & sandbox)
        for module in sorted(graph.modules - sandbox)
        if module.startswith("mailbus.")
    }
    assert {module: found for module, found in reached.items() if found} == {}
