"""The pure parts of bench/compare.py: the alternating order, the benchmark names, the
pairing of two sides' figures and their ratio."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import compare_doc
from report_doc import Summary


def figure(name: str, value: float, unit: str = "rows/s") -> dict[str, object]:
    return {"kind": "figure", "name": name, "value": value, "unit": unit}


def test_order_alternates_the_sides_run_by_run() -> None:
    assert compare_doc.order(3) == [("A", 0), ("B", 0), ("A", 1), ("B", 1), ("A", 2), ("B", 2)]


def test_benches_parses_a_comma_list() -> None:
    assert compare_doc.benches("relay, delivery") == ["relay", "delivery"]


@pytest.mark.parametrize("spec", ["", "relay,nope", ","])
def test_benches_refuses_an_unknown_or_empty_list_naming_the_known(spec: str) -> None:
    with pytest.raises(ValueError, match="known: relay"):
        compare_doc.benches(spec)


def test_pairs_summarize_each_side_and_take_the_ratio_of_medians() -> None:
    a = [figure("rows", 100), figure("rows", 300), figure("rows", 200), figure("ms", 4, "ms")]
    b = [figure("rows", 250), figure("rows", 150), figure("rows", 400), figure("cpu", 1, "ms")]
    rows = {p.name: p for p in compare_doc.pairs(a, b)}
    assert list(rows) == ["rows", "ms", "cpu"]
    assert rows["rows"].a == Summary("rows", "rows/s", 100, 200, 300, 3)
    assert rows["rows"].b == Summary("rows", "rows/s", 150, 250, 400, 3)
    assert rows["rows"].ratio == pytest.approx(1.25)
    assert rows["ms"].b is None and math.isnan(rows["ms"].ratio)
    assert rows["cpu"].a is None and rows["cpu"].unit == "ms"


def test_ratio_is_nan_without_a_usable_baseline() -> None:
    zero = Summary("x", "u", 0, 0, 0, 1)
    one = Summary("x", "u", 1, 1, 1, 1)
    nan = Summary("x", "u", float("nan"), float("nan"), float("nan"), 0)
    assert math.isnan(compare_doc.ratio(zero, one))
    assert math.isnan(compare_doc.ratio(nan, one))
    # printed as 0.00 (a CPU share measured as 2e-12): B/A read 237,031,559,332.70
    assert math.isnan(compare_doc.ratio(Summary("x", "u", 0, 2.5e-12, 1, 3), one))
    assert compare_doc.ratio(one, one) == 1


def test_table_shows_each_side_and_the_ratio() -> None:
    rows = compare_doc.pairs([figure("rows", 1000)], [figure("rows", 1500), figure("x", 2)])
    text = compare_doc.table(rows, "main", "speed")
    assert "| figure | unit | A main | B speed | B/A |" in text
    assert "| rows | rows/s | 1,000 (1,000-1,000, 1) | 1,500 (1,500-1,500, 1) | 1.50 |" in text
    assert "| x | rows/s | not measured | 2.00 (2.00-2.00, 1) | - |" in text


def test_top_frames_counts_self_and_inclusive_samples() -> None:
    import timeline

    text = timeline.top_frames("main;poll 3\nmain;settle;execute 1\nbad line\n")
    assert text.startswith("4 samples")
    assert " 75.0%  poll" in text and " 25.0%  execute" in text
    assert "100.0%  main" in text


def test_top_frames_sums_self_samples_by_library() -> None:
    import timeline

    text = timeline.top_frames(
        "run (asyncio/base_events.py:1) ;send (aiohttp/client.py:5) 3\n"
        "run (asyncio/base_events.py:1) ;load (mailbus/consumer/ledger.py:9) 1\n"
        "run (asyncio/base_events.py:1) ;decode (<frozen codecs>:3) 1\n"
    )
    by_library = text.split("self, by library:")[1].split("self:")[0]
    assert " 60.0%  aiohttp\n" in by_library
    assert " 20.0%  mailbus\n" in by_library and " 20.0%  <frozen codecs>\n" in by_library
