"""Reading an audience CSV: header checks, rejected lines with their numbers, variables."""

from __future__ import annotations

import io

import pytest

from mailbus.campaigns.audience import Recipient, Rejected, open_audience
from mailbus.campaigns.errors import CampaignError


def read(data: bytes) -> list[Recipient | Rejected]:
    return list(open_audience(io.BytesIO(data)).records())


def test_recipients_with_variables_in_order() -> None:
    audience = open_audience(
        io.BytesIO(
            b"user_id,email,first_name,plan\n"
            b"1,ana@example.com,Ana,gold\n"
            b"2, Bo@Example.com ,Bo,free\n"
        )
    )
    assert audience.columns == ["user_id", "first_name", "plan"]
    assert list(audience.records()) == [
        Recipient(2, "1", "ana@example.com", {"user_id": "1", "first_name": "Ana", "plan": "gold"}),
        Recipient(3, "2", "Bo@Example.com", {"user_id": "2", "first_name": "Bo", "plan": "free"}),
    ]


def test_header_in_any_order_and_case_with_bom_and_crlf_line_ends() -> None:
    data = "\ufeffEmail , USER_ID,Name\r\nana@example.com,7,Ána\r\n\r\nbo@example.org,8,Bo\r\n"
    got = read(data.encode())
    assert got == [
        Recipient(2, "7", "ana@example.com", {"user_id": "7", "Name": "Ána"}),
        Recipient(4, "8", "bo@example.org", {"user_id": "8", "Name": "Bo"}),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "line 1: no header row"),
        (b"\n", "line 1: no header row"),
        (b"id,email\n1,a@example.com\n", "no 'user_id' column"),
        (b"user_id,mail\n1,a@example.com\n", "no 'email' column"),
        (b"user_id,email,name,Name\n", "'Name' appears twice"),
        (b"user_id,email,,x\n", "column 3 of the header has no name"),
        (b'user_id,email,"na\nme"\n', "column 3 of the header is not a plain name"),
    ],
)
def test_a_bad_header_imports_nothing(data: bytes, message: str) -> None:
    with pytest.raises(CampaignError, match=message):
        open_audience(io.BytesIO(data))


def test_bad_lines_are_rejected_with_their_line_and_the_rest_kept() -> None:
    data = (
        b"user_id,email,subject\n"  # 1
        b"1,ana@example.com,Hi\n"  # 2
        b"2,not-an-address,Hi\n"  # 3
        b'3,cy@example.com,"Hi\r\nBcc: all@example.com"\n'  # 4-5: header injection
        b"4,dee@example.com\n"  # 6: a field short
        b"5 5,ed@example.com,Hi\n"  # 7: a space in the user id
        b",fay@example.com,Hi\n"  # 8
        b"6,gus@example.com,Caf\xe9\n"  # 9: Latin-1, not UTF-8
        b'7,"ann@example.com\nX",Hi\n'  # 10-11: a newline in the address
        b"8,hal@example.com,Hi\x00\n"  # 12: NUL
        b"9,ivy@example.com,Bye\n"  # 13
    )
    got = read(data)
    kept = [r for r in got if isinstance(r, Recipient)]
    rejected = {r.line: r.problem for r in got if isinstance(r, Rejected)}
    assert [(r.line, r.user_id) for r in kept] == [(2, "1"), (13, "9")]
    assert set(rejected) == {3, 4, 6, 7, 8, 9, 10, 12}
    assert "not a valid email address" in rejected[3]
    assert "header injection" in rejected[4]
    assert "expected 3 fields, found 2" in rejected[6]
    assert "user_id" in rejected[7] and "user_id: empty" in rejected[8]
    assert "UTF-8" in rejected[9]
    assert "header injection" in rejected[10] and "header injection" in rejected[12]


def test_a_user_id_too_long_for_a_dedupe_key_is_rejected() -> None:
    got = read(b"user_id,email\n" + b"u" * 161 + b",a@example.com\n" + b"u" * 160 + b",b@x.io\n")
    assert isinstance(got[0], Rejected) and "at most 160" in got[0].problem
    assert isinstance(got[1], Recipient)


def test_broken_quoting_loses_only_its_line() -> None:
    got = read(b'user_id,email\n1,"a@example.com"x\n2,b@example.com\n')
    assert isinstance(got[0], Rejected) and got[0].line == 2 and "CSV" in got[0].problem
    assert got[1] == Recipient(3, "2", "b@example.com", {"user_id": "2"})
