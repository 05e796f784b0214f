"""Fan-out progress for `mailbus campaign run`: a bar redrawn in place on a terminal,
plain lines every few seconds otherwise (a log file, a CI job).

:func:`render_line` and the kernel's :func:`render_bar` are pure; :class:`Progress`
decides when to write, on a clock passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from mailbus.kernel.progress import BAR_EVERY_S, render_bar, speed_and_eta

if TYPE_CHECKING:
    from mailbus.campaigns.pacer import TickResult

__all__ = ["Progress", "render_bar", "render_line"]

LINE_EVERY_S = 10.0  # a plain line at most this often


def render_line(campaign_id: int, done: int, total: int, speed: float | None) -> str:
    """``campaign 7: 625,000 of 1,000,000 handed out (62.5%), 52,083/s, eta 7s`` (pure)."""
    percent = 100.0 if total <= 0 else min(100.0, max(0.0, done * 100 / total))
    return (
        f"campaign {campaign_id}: {done:,} of {total:,} handed out ({percent:.1f}%)"
        f"{speed_and_eta(done, total, speed, ', ')}"
    )


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
