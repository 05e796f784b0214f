"""The pure parts of bench/report.py: min / median / max, number formatting, the tables, and
the figures a benchmark hands over through bench/results.py."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import report_doc
import results
from report_doc import Summary


def figure(name: str, value: float, unit: str = "rows/s") -> dict[str, object]:
    return {"kind": "figure", "name": name, "value": value, "unit": unit}


def test_summarize_takes_min_median_max_per_name_in_first_seen_order() -> None:
    figures = [figure("b", 3), figure("a", 10), figure("b", 1), figure("b", 2), figure("a", 20)]
    assert report_doc.summarize(figures) == [
        Summary("b", "rows/s", 1, 2, 3, 3),
        Summary("a", "rows/s", 10, 15, 20, 2),
    ]


def test_summarize_leaves_out_nan_and_keeps_a_figure_with_none_left() -> None:
    [kept, empty] = report_doc.summarize(
        [figure("p99", 5, "ms"), figure("p99", math.nan, "ms"), figure("p50", math.nan, "ms")]
    )
    assert kept == Summary("p99", "ms", 5, 5, 5, 1)
    assert empty.runs == 0 and math.isnan(empty.median)


@pytest.mark.parametrize(
    ("value", "shown"),
    [(12345.6, "12,346"), (100, "100"), (45.67, "45.7"), (3.14159, "3.14"), (math.nan, "-")],
)
def test_number(value: float, shown: str) -> None:
    assert report_doc.number(value) == shown


def test_table_has_a_header_and_a_row_per_summary() -> None:
    text = report_doc.table([Summary("relay rows/s", "rows/s", 900, 1000, 1100.4, 3)])
    assert text.splitlines() == [
        "| figure | unit | min | median | max | runs |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
        "| relay rows/s | rows/s | 900 | 1,000 | 1,100 | 3 |",
    ]


def test_load_range_spans_the_runs() -> None:
    runs = [
        {"load_before": [2.0, 1, 1], "load_after": [3.5, 1, 1]},
        {"load_before": [4.25, 1, 1], "load_after": [1.0, 1, 1]},
    ]
    assert report_doc.load_range(runs) == "2.0-4.2 before, 1.0-3.5 after"
    assert report_doc.load_range([]) == "-"


def test_comparison_table_says_what_was_not_measured() -> None:
    ours = Summary("relay rows/s, batched", "rows/s", 8000, 9000, 9500, 3)
    text = report_doc.comparison_table([("rows/s", ours, None)])
    assert text.splitlines()[-1] == (
        "| rows/s | 9,000 rows/s (8,000-9,500, 3 runs) | not measured |"
    )


def test_find_matches_by_prefix() -> None:
    summaries = [Summary("delivery emails/s, 1 consumer(s) at 64 in flight", "", 1, 2, 3, 3)]
    assert report_doc.find(summaries, "delivery emails/s") is summaries[0]
    assert report_doc.find(summaries, "relay") is None


def test_bench_section_names_the_command_sizes_and_failures() -> None:
    entry = {
        "command": "python3 bench/smtp_throughput.py --seconds 2 --runs 3",
        "quick": True,
        "taken": "2026-12-02 01:20 UTC",
        "runs": [
            {"figures": [figure("SMTP sends/s", 350, "sends/s")], "load_before": [4.9],
             "load_after": [5.1], "error": None},
            {"figures": [], "load_before": [5.0], "load_after": [5.0], "error": "boom"},
        ],
    }  # fmt: skip
    text = report_doc.bench_section("SMTP", "About.", entry, ["benchmarks/x.png"])
    assert "`python3 bench/smtp_throughput.py --seconds 2 --runs 3` — quick sizes" in text
    assert "**1 run(s) failed**: `boom`" in text
    assert "| SMTP sends/s | sends/s | 350 | 350 | 350 | 1 |" in text
    assert text.rstrip().endswith("![SMTP](benchmarks/x.png)")


def test_results_round_trip_through_the_file_named_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = tmp_path / "results.jsonl"
    monkeypatch.setenv(results.ENV, str(sink))
    results.record("relay rows/s", 1234.5, "rows/s")
    results.record_series("backlog", [(0.5, 10), (1.0, 12)])
    figures, series = results.read(str(sink))
    assert figures == [figure("relay rows/s", 1234.5)]
    assert series == [{"kind": "series", "name": "backlog", "points": [[0.5, 10], [1.0, 12]]}]


def test_results_write_nothing_when_the_environment_names_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(results.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    results.record("x", 1, "u")
    assert list(tmp_path.iterdir()) == []
    assert results.read(str(tmp_path / "missing.jsonl")) == ([], [])
