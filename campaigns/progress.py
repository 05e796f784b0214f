"""Fan-out progress for `mailbus campaign run`: a bar redrawn in place on a terminal,
plain lines every few seconds otherwise (a log file, a CI job).

:func:`render_bar` and :func:`render_line` are pure; :class:`Progress` decides when to
write, on a clock passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from mailbus.campaigns.pacer import TickResult

__all__ = ["Progress", "render_bar", "render_line"]

BAR_EVERY_S = 0.2  # a terminal redraw at most this often
LINE_EVERY_S = 10.0  # a plain line at most this often


def render_bar(done: int, total: int, speed: float | None, width: int = 30) -> str:
    """``[###################...........]  62.5%  625,000/1,000,000  52,083/s  eta 7s``
    (pure); ``speed`` in recipients a second, None while unknown."""
    fraction = 1.0 if total <= 0 else min(1.0, max(0.0, done / total))
    filled = round(fraction * width)
    return (
        f"[{'#' * filled}{'.' * (width - filled)}] {fraction * 100:5.1f}%"
        f"  {done:,}/{total:,}{_speed_and_eta(done, total, speed, '  ')}"
    )


def render_line(campaign_id: int, done: int, total: int, speed: float | None) -> str:
    """``campaign 7: 625,000 of 1,000,000 handed out (62.5%), 52,083/s, eta 7s`` (pure)."""
    percent = 100.0 if total <= 0 else min(100.0, max(0.0, done * 100 / total))
    return (
        f"campaign {campaign_id}: {done:,} of {total:,} handed out ({percent:.1f}%)"
        f"{_speed_and_eta(done, total, speed, ', ')}"
    )


def _speed_and_eta(done: int, total: int, speed: float | None, sep: str) -> str:
    if speed is None or speed <= 0:
        return ""
    return f"{sep}{speed:,.0f}/s{sep}eta {_duration(max(0, total - done) / speed)}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


class Progress:
    """Counts recipients handed out in this run (``started_at`` already done before it)
    and writes to ``out``: a bar in place when ``tty``, else a line now and then."""

    def __init__(
        self,
        campaign_id: int,
        total: int,
        out: TextIO,
        *,
        tty: bool,
        clock: Callable[[], float],
        already: int = 0,
    ) -> None:
        self.campaign_id = campaign_id
        self.total = total
        self.done = already
        self._already = already
        self._out = out
        self._tty = tty
        self._clock = clock
        self._started = clock()
        self._written_at: float | None = None

    def add_ticks(self, results: list[TickResult]) -> None:
        """A pacer round's results: the recipients handed out, and the audience imported so
        far (it grows while the import still runs)."""
        for result in results:
            self.total = max(self.total, result.recipients)
        self.add(sum(result.handed_out for result in results))

    def add(self, handed_out: int) -> None:
        self.done += handed_out
        now = self._clock()
        every = BAR_EVERY_S if self._tty else LINE_EVERY_S
        if self._written_at is None or now - self._written_at >= every:
            self._write(now)

    def finish(self) -> None:
        self._write(self._clock())
        if self._tty:
            self._out.write("\n")
        self._out.flush()

    def _write(self, now: float) -> None:
        self._written_at = now
        elapsed = now - self._started
        # The speed of this run (a resumed campaign's earlier part is not in it).
        speed = (self.done - self._already) / elapsed if elapsed > 0 else None
        if self._tty:
            bar = render_bar(self.done, self.total, speed)
            self._out.write(f"\rcampaign {self.campaign_id} {bar}\x1b[K")
        else:
            self._out.write(render_line(self.campaign_id, self.done, self.total, speed) + "\n")
        self._out.flush()
