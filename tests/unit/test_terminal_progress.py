"""The progress line of `campaign create/import`, `dlq replay` and `retention run`: drawn in
place on a terminal, at most every BAR_EVERY_S, and nothing at all elsewhere."""

from __future__ import annotations

import io

import pytest

from mailbus.kernel.progress import BAR_EVERY_S, TerminalProgress, render_count


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_bar_is_redrawn_in_place_and_its_line_ended() -> None:
    stream, clock = Terminal(), Clock()
    progress = TerminalProgress("replay", 4, stream, clock=clock)
    clock.now = 1.0
    progress.add(1)
    clock.now += BAR_EVERY_S / 2
    progress.add(1)  # too soon: not drawn
    clock.now = 2.0
    progress.add(2)
    progress.finish()
    assert stream.getvalue() == (
        "\rreplay [########......................]  25.0%  1/4  1/s  eta 3s\x1b[K"
        "\rreplay [##############################] 100.0%  4/4  2/s  eta 0s\x1b[K"
        "\rreplay [##############################] 100.0%  4/4  2/s  eta 0s\x1b[K\n"
    )


def test_without_a_total_it_counts() -> None:
    stream, clock = Terminal(), Clock()
    progress = TerminalProgress("retention 90d:", None, stream, unit="rows deleted", clock=clock)
    clock.now = 2.0
    progress.add(1000)
    assert stream.getvalue() == "\rretention 90d: 1,000 rows deleted  500/s\x1b[K"


@pytest.mark.parametrize("total", [3, None])
def test_nothing_is_written_when_the_stream_is_not_a_terminal(total: int | None) -> None:
    stream = io.StringIO()
    progress = TerminalProgress("replay", total, stream)
    for _ in range(3):
        progress.add(1)
    progress.finish()
    assert stream.getvalue() == "" and progress.done == 3


def test_a_line_printed_meanwhile_stands_alone_and_the_progress_follows() -> None:
    stream, clock = Terminal(), Clock()
    progress = TerminalProgress("campaign import:", None, stream, unit="lines read", clock=clock)
    clock.now = 1.0
    progress.add(10)
    progress.interrupt()
    stream.write("people.csv: line 7: not an address\n")
    progress.add(10)  # drawn again at once
    progress.interrupt()
    stream.write("people.csv: line 9: not an address\n")
    progress.finish()
    assert stream.getvalue().split("\r") == [
        "",
        "campaign import: 10 lines read  10/s\x1b[K",
        "\x1b[Kpeople.csv: line 7: not an address\n",
        "campaign import: 20 lines read  20/s\x1b[K",
        "\x1b[Kpeople.csv: line 9: not an address\n",
        "campaign import: 20 lines read  20/s\x1b[K\n",
    ]


def test_nothing_drawn_nothing_ended() -> None:
    stream = Terminal()
    TerminalProgress("replay", 0, stream).finish()  # no letter matched
    assert stream.getvalue() == ""


def test_render_count() -> None:
    assert render_count(120_000, "lines read", 60_000.4) == "120,000 lines read  60,000/s"
    assert render_count(0, "lines read", None) == "0 lines read"
