"""A command's progress, for the person watching a terminal: one line on stderr redrawn in
place, and nothing at all when stderr is not a terminal (a pipe, a log, a Job), where
only the command's result is printed.

:func:`render_bar` and :func:`render_count` are pure; :class:`TerminalProgress` decides
when to draw, on a clock passed in. Used by `campaign create/import`, `dlq replay` and
`retention run`; `campaign run` has its own (campaigns/progress.py: plain lines too).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["BAR_EVERY_S", "TerminalProgress", "render_bar", "render_count", "speed_and_eta"]

BAR_EVERY_S = 0.2  # a terminal redraw at most this often


def render_bar(done: int, total: int, speed: float | None, width: int = 30) -> str:
    """``[###################...........]  62.5%  625,000/1,000,000  52,083/s  eta 7s``
    (pure); ``speed`` in items a second, None while unknown."""
    fraction = 1.0 if total <= 0 else min(1.0, max(0.0, done / total))
    filled = round(fraction * width)
    return (
        f"[{'#' * filled}{'.' * (width - filled)}] {fraction * 100:5.1f}%"
        f"  {done:,}/{total:,}{speed_and_eta(done, total, speed, '  ')}"
    )


def render_count(done: int, unit: str, speed: float | None) -> str:
    """``120,000 rows  60,000/s`` (pure): work whose total is not known."""
    rate = f"  {speed:,.0f}/s" if speed is not None and speed > 0 else ""
    return f"{done:,} {unit}{rate}"


def speed_and_eta(done: int, total: int, speed: float | None, sep: str) -> str:
    if speed is None or speed <= 0:
        return ""
    return f"{sep}{speed:,.0f}/s{sep}eta {_duration(max(0, total - done) / speed)}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


class TerminalProgress:
    """``label [####....]  40.0%  40/100  20/s  eta 3s`` (a ``total``), or
    ``label 40 unit  20/s`` (None), redrawn in place on ``stream`` at most every
    :data:`BAR_EVERY_S`, only when ``stream`` is a terminal; otherwise it writes nothing."""

    def __init__(
        self,
        label: str,
        total: int | None,
        stream: TextIO,
        *,
        unit: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.done = 0
        self._stream, self._clock = stream, clock
        self._on = stream.isatty()
        self._started = clock()
        self._drawn_at: float | None = None  # None: draw at the next update
        self._drawn = False  # a line was drawn: finish() ends it

    def add(self, count: int) -> None:
        self.update(self.done + count)

    def update(self, done: int) -> None:
        self.done = done
        if not self._on:
            return
        now = self._clock()
        if self._drawn_at is None or now - self._drawn_at >= BAR_EVERY_S:
            self._draw(now)

    def interrupt(self) -> None:
        """Clear the line drawn, so that a line printed now stands alone (it is drawn again
        at the next update)."""
        if self._on and self._drawn_at is not None:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._drawn_at = None

    def finish(self) -> None:
        """Draw the last state and end the line (a stopped run keeps where it stopped)."""
        if self._on and self._drawn:
            self._draw(self._clock())
            self._stream.write("\n")
            self._stream.flush()

    def _draw(self, now: float) -> None:
        self._drawn_at, self._drawn = now, True
        elapsed = now - self._started
        speed = self.done / elapsed if elapsed > 0 else None
        shown = (
            render_count(self.done, self.unit, speed)
            if self.total is None
            else render_bar(self.done, self.total, speed)
        )
        self._stream.write(f"\r{self.label} {shown}\x1b[K")
        self._stream.flush()
