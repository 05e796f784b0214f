"""Reading suppression CSVs: header, lower-casing, bad lines with their line numbers."""

from __future__ import annotations

import io

import pytest

from mailbus.feedback.suppression_file import (
    BadLine,
    Entry,
    InvalidFileError,
    batches,
    read_entries,
)


def read(text: str) -> list[Entry | BadLine]:
    return list(read_entries(io.StringIO(text, newline="")))


def test_addresses_are_lower_cased_with_their_reasons_and_lines() -> None:
    got = read("email,reason\nAna@Example.COM,bounced\n  bo@example.org  ,\n")
    assert got == [
        Entry(2, "ana@example.com", "bounced"),
        Entry(3, "bo@example.org", None),
    ]


def test_column_order_case_and_extra_columns() -> None:
    got = read("\ufeffReason,user_id,EMAIL\nspam,7,c@example.com\n")
    assert got == [Entry(2, "c@example.com", "spam")]


def test_bad_lines_keep_their_line_numbers_and_blank_lines_are_skipped() -> None:
    got = read('email\na@example.com\n\nnot-an-address\n"multi\nline"\nb@example.com\n,\n')
    assert [type(item).__name__ for item in got] == ["Entry", "BadLine", "BadLine", "Entry"]
    bad = [item for item in got if isinstance(item, BadLine)]
    assert [b.line for b in bad] == [4, 6]
    assert bad[0].text == "not-an-address"
    assert got[-1] == Entry(7, "b@example.com", None)


def test_a_row_without_the_email_cell_is_bad() -> None:
    got = read("reason,email\nonly-a-reason\n")
    assert got == [BadLine(2, "", "must be a non-empty string")]


@pytest.mark.parametrize("text", ["", "address,reason\na@example.com,x\n"])
def test_a_file_without_an_email_header_is_refused(text: str) -> None:
    with pytest.raises(InvalidFileError):
        read(text)


def test_batches() -> None:
    assert list(batches(range(7), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batches([], 3)) == []
