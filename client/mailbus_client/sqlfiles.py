"""Named SQL queries kept in ``.sql`` files next to the code that runs them.

A file holds blocks introduced by ``-- name: some_query``; :func:`load_queries` returns
them by name. Loaded once per file through ``importlib.resources``.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["load_queries"]


@cache
def load_queries(package: str, filename: str) -> dict[str, str]:
    text = resources.files(package).joinpath(filename).read_text()
    queries: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        if line.startswith("-- name:"):
            name = line.removeprefix("-- name:").strip()
            queries[name] = ""
        elif name is not None:
            queries[name] += line + "\n"
    if not queries:
        raise ValueError(f"{package}/{filename} holds no '-- name:' blocks")
    return {key: sql.strip() for key, sql in queries.items()}
