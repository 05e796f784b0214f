"""Graceful stop for long-running commands: SIGTERM and SIGINT set one event.

One event per process: a command may ask for it more than once (the schema check a
long-running process waits in at start, then the process itself), and a signal that
arrives between two of those calls must not be lost, or the process runs on for ever.
"""

import signal
import threading

__all__ = ["stop_on_signals"]

_stop: threading.Event | None = None


def stop_on_signals() -> threading.Event:
    """The process's event set by SIGTERM or SIGINT (the same one at every call):
    long-running commands finish what they hold."""
    global _stop
    if _stop is None:
        stop = threading.Event()

        def handle(_signum: int, _frame: object) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
        _stop = stop
    return _stop
