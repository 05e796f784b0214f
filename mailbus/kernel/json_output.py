"""The ``--json`` option of the commands that print a result, and how they print it: one
document on stdout (its shape per command: docs/reference/cli.md#json-documents; errors go
to stderr as JSON through mailbus/app/exit_codes.py)."""

from __future__ import annotations

import argparse
import json

__all__ = ["add_json_option", "print_document"]


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="the result as one JSON document on stdout, errors as JSON on stderr",
    )


def print_document(document: object) -> None:
    print(json.dumps(document, indent=2))
