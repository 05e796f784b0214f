"""The fan-out progress of `mailbus campaign run`: pure rendering, and when it writes."""

from __future__ import annotations

import io

import pytest

from mailbus.campaigns.progress import Progress, render_bar, render_line


@pytest.mark.parametrize(
    ("done", "total", "speed", "expected"),
    [
        (0, 1000, None, "[..........]   0.0%  0/1,000"),
        (250, 1000, 50.0, "[##........]  25.0%  250/1,000  50/s  eta 15s"),
        (1000, 1000, 50.0, "[##########] 100.0%  1,000/1,000  50/s  eta 0s"),
        (625_000, 1_000_000, 52_083.3, "[######....]  62.5%  625,000/1,000,000  52,083/s  eta 7s"),
        (10, 10_000_000, 1.0, "[..........]   0.0%  10/10,000,000  1/s  eta 2777.8h"),
        (5, 0, 0.0, "[##########] 100.0%  5/0"),  # an empty audience, no division by zero
    ],
)
def test_render_bar(done: int, total: int, speed: float | None, expected: str) -> None:
    assert render_bar(done, total, speed, width=10) == expected


def test_render_line() -> None:
    assert render_line(7, 300, 1200, 60.0) == (
        "campaign 7: 300 of 1,200 handed out (25.0%), 60/s, eta 15s"
    )
    assert render_line(7, 0, 1200, None) == "campaign 7: 0 of 1,200 handed out (0.0%)"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_terminal_gets_one_bar_redrawn_in_place() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(3, 1000, out, tty=True, clock=clock, already=500)
    for _ in range(4):
        clock.now += 0.05  # four ticks in 0.2 s: the first draws, the next three do not
        progress.add(100)
    clock.now += 0.2
    progress.add(100)
    progress.finish()
    text = out.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
    last = text.rsplit("\r", 1)[1]
    assert last.startswith("campaign 3 [") and "100.0%  1,000/1,000" in last
    assert "/s" in last and "\x1b[K" in last  # speed of this run; the line's rest cleared


def test_no_terminal_gets_plain_lines_now_and_then() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(3, 10_000, out, tty=False, clock=clock)
    for _ in range(100):
        clock.now += 1.0
        progress.add(100)  # 100 seconds: a line at the first tick, then every 10 s
    progress.finish()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert len(lines) == 11  # 10 while running, 1 at the end
    assert lines[0] == "campaign 3: 100 of 10,000 handed out (1.0%), 100/s, eta 99s"
    assert lines[-1] == "campaign 3: 10,000 of 10,000 handed out (100.0%), 100/s, eta 0s"
