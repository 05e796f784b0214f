"""The relay's setting of Python's cyclic garbage collector (issue 21).

A pointer batch keeps thousands of container objects alive at once (rows, records,
messages, delivery callbacks) until it commits. With the default thresholds (700, 10, 10)
the collector ran every ~120 rows, found almost nothing to free (those objects die by
reference counting when the batch ends), promoted them, and now and then walked the whole
heap, modules and all: 15% of the relay's samples in a native profile were
``gc_collect_main`` (docs/benchmarks/speed.md). Freezing what start-up built takes it out
of every later collection, and a young generation of 50,000 objects collects after some
batches rather than within each. Cycles are still collected, just later.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "tune_collector"]

YOUNG_THRESHOLD = 50_000  # allocations between two young collections (Python's default: 700)


def tune_collector() -> None:
    """Call once, after start-up built everything long-lived and before the first batch."""
    gc.freeze()  # start-up's objects move to the permanent generation, never scanned again
    gc.set_threshold(YOUNG_THRESHOLD, 20, 20)
