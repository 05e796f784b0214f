"""A misspelt ``MAILBUS_*`` variable is refused, not silently ignored.

The rate limit spelt without its last underscore once ran with no limit and exit status 0.
Every process now compares the ``MAILBUS_*`` names of its environment with the settings table
(:func:`mailbus.kernel.settings_doc.names`, so a setting added there is known here) and
refuses the first unknown one with the nearest known name.

Outside the table, only the variables of the tools around mailbus are allowed, by the
explicit list below: they configure the local stack, the tests and the benchmarks, never a
mailbus process, so a typo in them cannot change what mailbus does.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings_doc import names

__all__ = ["TOOL_PREFIXES", "TOOL_VARIABLES", "check_names"]

TOOL_PREFIXES = (
    "MAILBUS_STACK_",  # stack/local-stack.sh: ports and directories of the local stack
    "MAILBUS_TEST_",  # tests/: e.g. MAILBUS_TEST_SCHEMA_REGISTRY_URL
)
TOOL_VARIABLES = frozenset(
    {
        "MAILBUS_CACHE_DIR",  # stack/*.sh, bench/peers: where downloaded tools are cached
        "MAILBUS_K8S_VERSIONS",  # stack/check_manifests.py: schemas to validate against
        "MAILBUS_BENCH_RESULTS",  # bench/results.py: where figures are written
    }
)


def check_names(environ: Iterable[str], known: frozenset[str] | None = None) -> None:
    """Raise ConfigError naming the first unknown ``MAILBUS_*`` variable of ``environ``
    (sorted, so the same environment gives the same error) and the nearest known name."""
    table = frozenset(names()) if known is None else known
    for name in sorted(environ):
        if not name.startswith("MAILBUS_") or name in table or name in TOOL_VARIABLES:
            continue
        if name.startswith(TOOL_PREFIXES):
            continue
        nearest = difflib.get_close_matches(name, table, n=1, cutoff=0.6)
        hint = f"; did you mean {nearest[0]}?" if nearest else " (see mailbus --help)"
        raise ConfigError(name, f"not a mailbus setting{hint}")
