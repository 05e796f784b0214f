"""``python -m sandbox``: the sandbox email API, same options as ``mailbus sandbox``."""

from __future__ import annotations

import argparse
import sys

from mailbus.sandbox.server import add_arguments, main


def _entry() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox", description="Run the fault-injectable sandbox email API."
    )
    add_arguments(parser)
    return main(parser.parse_args())


if __name__ == "__main__":
    sys.exit(_entry())
