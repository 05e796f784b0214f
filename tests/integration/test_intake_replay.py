"""`mailbus dlq replay` of intake dead letters (issue 18): the stored event is mapped again
through the intake's mappings into one row, or refused again with the reason; each letter
is replayed once, even by two replays at once, all as mailbus_operator."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from services import REPO, run_mailbus
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.intake.events import EventReader
from mailbus.intake.mappings import load_mappings
from mailbus.intake.rows import RowWriter, letters_documents
from mailbus.intake.service import Incoming, sort_batch
from mailbus.schemas.codec import order_placed_codec
from mailbus_client.policies import configured_policy_book

pytestmark = pytest.mark.stack

_NOW_MS = int(time.time() * 1000)


def _order(order_id: str) -> bytes:
    return order_placed_codec().encode(
        {
            "event_id": f"evt-{order_id}",
            "order_id": order_id,
            "customer_email": "buyer@example.com",
            "occurred_at": _NOW_MS,
        }
    )


def _dead_letter_as_the_intake(database_url: str, mappings: Path, values: list[bytes]) -> None:
    """The intake's own path, as mailbus_intake: read with ``mappings``, store the letters."""
    reader = EventReader(load_mappings(str(mappings)), configured_policy_book())
    batch = [Incoming("orders.events", 0, n, b"k", value) for n, value in enumerate(values)]
    found = sort_batch(reader, batch)
    assert not found.rows and len(found.letters) == len(values)
    with login_as(database_url, "mailbus_intake") as url:
        writer = RowWriter(url, 3 * 24 * 3600)
        asyncio.run(writer.insert(None, letters_documents(found.letters)))
        asyncio.run(writer.close())


_REPLAY = [sys.executable, "-m", "mailbus", "dlq", "replay", "--no-pace", "--why", "mapping fixed"]


def test_an_intake_dead_letter_is_mapped_again_into_one_row_once(
    database_url: str, tmp_path: Path
) -> None:
    apply_roles(database_url)
    broken = json.loads((REPO / "schemas" / "intake_mappings.json").read_text())
    broken["mappings"][0]["dedupe_key"] = "order-{customer_name}-confirmation"  # always null
    broken_file = tmp_path / "mappings.json"
    broken_file.write_text(json.dumps(broken))
    _dead_letter_as_the_intake(database_url, broken_file, [_order("R1"), _order("")])

    with login_as(database_url, "mailbus_operator") as url:
        env = {"MAILBUS_DATABASE_URL": url, "PATH": "/usr/bin:/bin"}  # the fixed (shipped) mappings
        both = [
            subprocess.Popen(
                _REPLAY, cwd=REPO, env=env, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True,
            )
            for _ in range(2)
        ]  # fmt: skip
        outputs = [replay.communicate(timeout=60) for replay in both]
        assert [replay.returncode for replay in both] == [0, 0], outputs
        summaries = sorted(out.strip().splitlines()[-1] for out, _ in outputs)
        assert sum(int(s.split()[1].rstrip(",")) for s in summaries) == 1, summaries
        assert all("still intake_invalid: OrderPlaced: order_id" in s for s in summaries)

        again = run_mailbus("dlq", "replay", "--no-pace", env=env)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip().splitlines()[-1].startswith("replayed 0, skipped 1")

    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT id, dedupe_key, status, template, priority FROM email_sends"
        ).fetchall()
        letters = conn.execute(
            "SELECT send_id, replayed_at IS NOT NULL, reason FROM email_dead_letters"
            " ORDER BY original_offset"
        ).fetchall()
        audits = conn.execute("SELECT send_id, reason FROM email_replays").fetchall()
    [(send_id, key, status, template, priority)] = rows
    assert (key, status, template, priority) == (
        "order-R1-confirmation", "pending", "order_confirmation", "p1",
    )  # fmt: skip
    assert letters == [(send_id, True, "intake_invalid"), (None, False, "intake_invalid")]
    assert audits == [(send_id, "mapping fixed")]
