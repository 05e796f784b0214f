"""The setting of Python's cyclic garbage collector for the relay and the consumer
(issues 21 and 37).

Both keep thousands of container objects alive at once that die by reference counting,
not by the collector: the relay a pointer batch (rows, records, messages, delivery
callbacks) until it commits; the consumer its in-flight mails (a task, its coroutines,
futures, rows and decisions each; four times ``MAILBUS_MAX_IN_FLIGHT`` of them). With the default
thresholds (700, 10, 10) the collector ran over and over and found almost nothing to free:
461 collections and 0.11 s of CPU for 100,000 rows in the relay, about 1 µs of its 10 µs
per row; in one consumer, 0.71 s of 11.2 s of CPU for 20,000 mails, about 35 µs per mail,
including full collections that walk every object start-up built
(docs/benchmarks/speed.md). Freezing what start-up built takes it out of every later
collection, and with a young generation of 50,000 objects the relay's 100,000 rows ran
none and the consumer's collector took 0.12 s. Cycles are still collected, just later.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "tune_collector"]

YOUNG_THRESHOLD = 50_000  # allocations between two young collections (Python's default: 700)


def tune_collector() -> None:
    """Call once, after start-up built everything long-lived and before the first batch."""
    gc.freeze()  # start-up's objects move to the permanent generation, never scanned again
    gc.set_threshold(YOUNG_THRESHOLD, 20, 20)
