"""Graceful stop for long-running commands: SIGTERM and SIGINT set one event."""

import signal
import threading

__all__ = ["stop_on_signals"]


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT: long-running commands finish what they hold."""
    stop = threading.Event()

    def handle(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop
