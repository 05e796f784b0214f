"""The relay's setting of Python's cyclic garbage collector (issue 21).

A pointer batch keeps thousands of container objects alive at once (rows, records,
messages, delivery callbacks) until it commits. With the default thresholds (700, 10, 10)
the collector ran every ~200 rows and found almost nothing to free (those objects die by
reference counting when the batch ends): 461 collections and 0.11 s of CPU for 100,000
rows, about 1 µs of the relay's 10 µs per row (docs/benchmarks/speed.md). Freezing what
start-up built takes it out of every later collection, and with a young generation of
50,000 objects the same 100,000 rows ran none. Cycles are still collected, just later.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "tune_collector"]

YOUNG_THRESHOLD = 50_000  # allocations between two young collections (Python's default: 700)


def tune_collector() -> None:
    """Call once, after start-up built everything long-lived and before the first batch."""
    gc.freeze()  # start-up's objects move to the permanent generation, never scanned again
    gc.set_threshold(YOUNG_THRESHOLD, 20, 20)
