"""The audience import in parts, against real PostgreSQL: the pacer hands out committed
parts while the rest is read and never ends the campaign early, repeated user ids found
after some were handed out, a cancel that ends the import, and imports that stopped
(an exception mid-part, a SIGKILL) going on from their last part for a CSV and a SQL
audience: every line in the table once."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from relay_runner import wait_until
from services import REPO, run_mailbus

from mailbus.campaigns.audience import Rejected, open_audience
from mailbus.campaigns.errors import CampaignError
from mailbus.campaigns.pacer import Pacer
from mailbus.campaigns.sql_audience import SqlAudience
from mailbus.campaigns.store import CampaignSpec, create_campaign, import_audience, transition

UNPACED = CampaignSpec(name="parts", template="newsletter", rate_per_min=10**9)


def csv_bytes(rows: list[tuple[str, str]]) -> bytes:
    return ("user_id,email\n" + "".join(f"{u},{e}\n" for u, e in rows)).encode()


def one(database_url: str, sql: str, *params: Any) -> Any:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(sql, params).fetchone()  # type: ignore[arg-type]
        assert row is not None
        return row[0] if len(row) == 1 else row


class Interleaved:
    """An audience that runs ``action`` just before it yields line ``at``: inside the
    import's transaction of the part that holds that line."""

    last_key: str | None = None

    def __init__(self, data: bytes, actions: dict[int, Any]) -> None:
        self._audience = open_audience(io.BytesIO(data))
        self._actions = actions

    def records(self, after: int = 0, after_key: str | None = None) -> Iterator[Any]:
        for record in self._audience.records(after, after_key):
            if record.line in self._actions:
                self._actions[record.line]()
            yield record


def test_the_pacer_hands_out_committed_parts_and_waits_for_the_rest(database_url: str) -> None:
    # Users 1..20 on lines 2..21, user 3 again on line 22 (handed out before the import
    # ends), users 21..30 on lines 23..32, user 25 again on line 33 (not handed out by
    # then); user 7 is suppressed. Parts of 10 lines: 2..11, 12..21, 22..31, 32..33.
    rows = [(f"u{i}", f"user{i}@example.com") for i in range(1, 21)]
    rows += [("u3", "other3@example.com")]
    rows += [(f"u{i}", f"user{i}@example.com") for i in range(21, 31)]
    rows += [("u25", "other25@example.com")]
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO email_suppressions (address) VALUES ('USER7@example.com')")
    pacer = Pacer(database_url)
    ticks: list[Any] = []

    def tick() -> None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            ticks.append(pacer.tick(conn, campaign_id))

    audience = Interleaved(csv_bytes(rows), {24: tick, 33: tick})
    rejected: list[Rejected] = []
    campaign_id = 0

    def started(new_id: int) -> None:
        nonlocal campaign_id
        campaign_id = new_id
        transition(database_url, new_id, "start")

    report = create_campaign(
        database_url, UNPACED, audience, rejected.append, on_created=started, part_size=10
    )
    # At line 24 lines up to 21 were committed: 20 users handed out, one suppressed.
    first, second = ticks
    assert (first.handed_out, first.created, first.suppressed) == (20, 19, 1)
    assert (first.finished, first.limited_by) == (False, "import")
    # At line 33 lines up to 31: the repeat of user 3 (no row of its own) and users 21..29.
    assert (second.handed_out, second.created, second.finished) == (10, 9, False)
    assert (report.recipients, report.rejected, report.completed) == (30, 2, True)
    assert [(r.line, r.problem) for r in rejected] == [
        (22, "user_id 'u3' repeats line 4"),
        (33, "user_id 'u25' repeats line 27"),
    ]
    with psycopg.connect(database_url, autocommit=True) as conn:
        last = pacer.tick(conn, campaign_id)
    assert last is not None and (last.handed_out, last.created, last.fanned_out) == (1, 1, True)
    assert not last.finished  # its mail is not final yet
    figures = one(
        database_url,
        "SELECT state, importing, recipients, processed, created_rows, suppressed,"
        " invalid_lines FROM campaigns WHERE id = %s",
        campaign_id,
    )
    assert figures == ("running", False, 30, 30, 29, 1, 2)
    keys = one(
        database_url,
        "SELECT array_agg(to_address ORDER BY id) FROM email_sends WHERE campaign_id = %s",
        campaign_id,
    )
    assert keys == [f"user{i}@example.com" for i in range(1, 31) if i != 7]


def test_a_cancel_ends_the_import_and_keeps_only_committed_parts(database_url: str) -> None:
    rows = [(f"u{i}", f"user{i}@example.com") for i in range(1, 51)]
    campaign_id = 0

    def cancel() -> None:
        transition(database_url, campaign_id, "cancel")

    def created(new_id: int) -> None:
        nonlocal campaign_id
        campaign_id = new_id

    report = create_campaign(
        database_url,
        UNPACED,
        Interleaved(csv_bytes(rows), {25: cancel}),
        lambda rejected: None,
        on_created=created,
        part_size=10,
    )
    assert (report.recipients, report.completed) == (20, False)  # lines 2..21
    assert one(
        database_url, "SELECT state, importing FROM campaigns WHERE id = %s", campaign_id
    ) == ("cancelled", False)
    with pytest.raises(CampaignError, match="import is not open"):
        import_audience(database_url, campaign_id, open_audience(io.BytesIO(b"user_id,email\n")),
                        lambda rejected: None)  # fmt: skip


class Crash(Exception):
    pass


def crash() -> None:
    raise Crash


def ordinals(database_url: str, campaign_id: int) -> list[int]:
    return one(  # type: ignore[no-any-return]
        database_url,
        "SELECT coalesce(array_agg(ordinal ORDER BY ordinal), '{}') FROM campaign_recipients"
        " WHERE campaign_id = %s",
        campaign_id,
    )


def test_an_import_that_stopped_mid_part_goes_on_from_its_last_part(database_url: str) -> None:
    rows = [(f"u{i}", f"user{i}@example.com") for i in range(1, 41)]
    rows[16] = ("u17", "not-an-address")  # line 18: rejected in the first run, once
    data = csv_bytes(rows)
    campaign_id = 0

    def created(new_id: int) -> None:
        nonlocal campaign_id
        campaign_id = new_id

    rejected: list[Rejected] = []
    with pytest.raises(Crash):
        create_campaign(database_url, UNPACED, Interleaved(data, {35: crash}),
                        rejected.append, on_created=created, part_size=10)  # fmt: skip
    assert one(
        database_url,
        "SELECT importing, imported_through, recipients FROM campaigns WHERE id = %s",
        campaign_id,
    ) == (True, 31, 29)
    assert [r.line for r in rejected] == [18]
    report = import_audience(
        database_url, campaign_id, open_audience(io.BytesIO(data)), rejected.append, part_size=10
    )
    assert (report.recipients, report.rejected, report.completed) == (39, 1, True)
    assert [r.line for r in rejected] == [18]  # the resumed run did not read it again
    assert ordinals(database_url, campaign_id) == [n for n in range(2, 42) if n != 18]


def test_a_sql_audience_goes_on_from_its_keyset_key(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE TABLE app_users (id bigint PRIMARY KEY, email text NOT NULL)")
        conn.execute(
            "INSERT INTO app_users SELECT i * 7, format('user%%s@example.com', i)"
            " FROM generate_series(1, 45) AS i"
        )
    query = "SELECT id AS user_id, email FROM app_users"
    campaign_id = 0

    def created(new_id: int) -> None:
        nonlocal campaign_id
        campaign_id = new_id

    class CrashingQuery(SqlAudience):
        def records(self, after: int = 0, after_key: str | None = None) -> Iterator[Any]:
            for record in super().records(after, after_key):
                if record.line == 27:
                    raise Crash
                yield record

    with CrashingQuery(database_url, query, page_size=4) as audience, pytest.raises(Crash):
        create_campaign(database_url, UNPACED, audience, lambda rejected: None,
                        on_created=created, part_size=10)  # fmt: skip
    assert one(
        database_url, "SELECT imported_through, imported_key FROM campaigns WHERE id = %s",
        campaign_id,
    ) == (20, "140")  # fmt: skip
    with SqlAudience(database_url, query, page_size=4) as audience:
        report = import_audience(
            database_url, campaign_id, audience, lambda rejected: None, part_size=10
        )
    assert (report.recipients, report.completed) == (45, True)
    users = one(
        database_url,
        "SELECT array_agg(user_id::bigint ORDER BY ordinal) FROM campaign_recipients"
        " WHERE campaign_id = %s",
        campaign_id,
    )
    assert users == [i * 7 for i in range(1, 46)]
    assert ordinals(database_url, campaign_id) == list(range(1, 46))


def test_a_second_importer_of_the_same_campaign_is_refused(database_url: str) -> None:
    data = csv_bytes([(f"u{i}", f"user{i}@example.com") for i in range(1, 31)])
    outcome: list[str] = []

    def second_importer() -> None:
        try:
            import_audience(database_url, campaign_id, open_audience(io.BytesIO(data)),
                            lambda rejected: None)  # fmt: skip
        except CampaignError as exc:
            outcome.append(str(exc))

    campaign_id = 0

    def created(new_id: int) -> None:
        nonlocal campaign_id
        campaign_id = new_id

    report = create_campaign(database_url, UNPACED, Interleaved(data, {15: second_importer}),
                             lambda rejected: None, on_created=created, part_size=10)  # fmt: skip
    assert outcome == [f"campaign {campaign_id} is being imported by another process"]
    assert report.recipients == 30


def test_a_sigkilled_import_goes_on_with_campaign_import(database_url: str, tmp_path: Path) -> None:
    n = 60_000
    audience = tmp_path / "audience.csv"
    audience.write_text(
        "user_id,email\n" + "".join(f"{i},user{i}@example.com\n" for i in range(1, n + 1))
    )
    env = {**os.environ, "MAILBUS_DATABASE_URL": database_url,
           "MAILBUS_CAMPAIGN_IMPORT_PART": "2000"}  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "mailbus", "campaign", "create", "--name", "killed",
         "--template", "newsletter", "--audience", str(audience)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(
            lambda: one(database_url, "SELECT count(*) FROM campaigns WHERE imported_through > 0"),
            60,
            "a committed part",
        )
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(30)
    (campaign_id, importing, through) = one(
        database_url, "SELECT id, importing, imported_through FROM campaigns"
    )
    assert importing and 0 < through < n + 1  # killed mid-import
    resumed = run_mailbus(
        "campaign", "import", str(campaign_id), "--audience", str(audience), env=env, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines()[-1] == str(campaign_id)
    assert f"{n} recipients imported" in resumed.stdout
    assert ordinals(database_url, campaign_id) == list(range(2, n + 2))
    again = run_mailbus(
        "campaign", "import", str(campaign_id), "--audience", str(audience), env=env
    )
    assert again.returncode != 0 and "import is not open" in again.stderr


def test_status_names_an_import_not_complete(database_url: str) -> None:
    data = csv_bytes([(f"u{i}", f"user{i}@example.com") for i in range(1, 31)])
    env = {**os.environ, "MAILBUS_DATABASE_URL": database_url}
    created: list[int] = []
    with pytest.raises(Crash):
        create_campaign(database_url, UNPACED, Interleaved(data, {25: crash}),
                        lambda rejected: None, on_created=created.append,
                        part_size=10)  # fmt: skip
    shown = run_mailbus("campaign", "status", str(created[0]), env=env)
    assert "audience import not complete: read through line 21" in shown.stdout
    assert f"mailbus campaign import {created[0]}" in shown.stdout
