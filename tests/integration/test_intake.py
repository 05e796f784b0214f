"""`mailbus intake` as a process against the real Kafka and PostgreSQL.

Each test publishes OrderPlaced events to a topic of its own, runs the intake as a
subprocess (``python -m mailbus intake``), and checks the table, the intake DLQ and the
consumer group's committed offsets.
"""

from __future__ import annotations

import json
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_reader import read_messages
from services import REPO, run_mailbus, settings_env

from mailbus.intake.sample import publish_records, sample_events
from mailbus.kernel.settings import Settings
from mailbus.kernel.topics import create_topics
from mailbus.schemas.codec import order_placed_codec

pytestmark = pytest.mark.stack

_STARTUP_S = 60.0


class Intake:
    """One `mailbus intake` subprocess; its output goes to a file for failure messages."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mailbus", "intake"],
            cwd=REPO,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout=timeout)
        self._out.close()
        return code

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def intake_env(settings: Settings, tmp_path: Path) -> dict[str, str]:
    topic = f"{settings.topic_prefix}.orders.events"
    create_topics(settings, [topic])
    return settings_env(
        settings,
        MAILBUS_INTAKE_TOPIC=topic,
        MAILBUS_STATE_DIR=str(tmp_path / "state"),
        MAILBUS_INTAKE_BATCH_WAIT="0.05",
        MAILBUS_INTAKE_SESSION_TIMEOUT="6",  # a killed intake's partitions move after 6 s
        MAILBUS_LOG_LEVEL="INFO",  # the summary at stop is an INFO log line
    )


@pytest.fixture
def start_intake(intake_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Intake]]:
    started: list[Intake] = []

    def start(**extra: str) -> Intake:
        intake = Intake({**intake_env, **extra}, tmp_path / "intake.log")
        started.append(intake)
        return intake

    yield start
    for intake in started:
        if intake.process.poll() is None:
            intake.process.kill()
            intake.process.wait(timeout=30)


def _topic(env: dict[str, str]) -> str:
    return env["MAILBUS_INTAKE_TOPIC"]


def _produce(bootstrap: str, topic: str, records: Sequence[tuple[bytes, bytes]]) -> list[int]:
    """Publish ``(key, value)`` pairs in order to partition 0; return their offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    offsets: dict[int, int] = {}
    for number, (key, value) in enumerate(records):

        def delivered(error: object, message: object, number: int = number) -> None:
            assert error is None, error
            offsets[number] = message.offset()  # type: ignore[attr-defined]

        producer.produce(
            topic, key=key, value=value, partition=0, headers=[("trace", b"t")],
            on_delivery=delivered,
        )  # fmt: skip
    assert producer.flush(30) == 0
    return [offsets[number] for number in range(len(records))]


def _rows(database_url: str) -> dict[str, tuple[str, str, str, dict[str, object]]]:
    with psycopg.connect(database_url) as conn:
        found = conn.execute(
            "SELECT dedupe_key, to_address, template, priority, payload_json FROM email_sends"
        ).fetchall()
    return {
        key: (to, template, priority, payload) for key, to, template, priority, payload in found
    }


def _count(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM email_sends").fetchone()
    return int(row[0]) if row else 0


def _wait_for_rows(database_url: str, expected: int, intake: Intake, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _count(database_url) >= expected:
            return
        assert intake.process.poll() is None, f"intake exited:\n{intake.output()}"
        time.sleep(0.2)
    raise AssertionError(
        f"{_count(database_url)} rows, expected {expected}, after {timeout}s:\n{intake.output()}"
    )


def _committed(settings: Settings, topic: str, partitions: int) -> list[int]:
    """The intake group's committed offset per partition (-1001: none)."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": f"{settings.topic_prefix}-intake",
        }
    )
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def _ends(settings: Settings, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": "ends"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def _wait_until_committed(settings: Settings, topic: str, timeout: float = 30) -> None:
    ends = _ends(settings, topic, settings.partitions)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        committed = _committed(settings, topic, settings.partitions)
        if [max(offset, 0) for offset in committed] == ends:  # an empty partition has none
            return
        time.sleep(0.5)
    raise AssertionError(f"committed {_committed(settings, topic, settings.partitions)} != {ends}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


_NOW_MS = int(time.time() * 1000) // 1000 * 1000  # within MAILBUS_INTAKE_MAX_AGE


def _order(order_id: str, event_id: str, email: str | None = None, **more: object) -> bytes:
    return order_placed_codec().encode(
        {
            "event_id": event_id,
            "order_id": order_id,
            "customer_email": f"buyer-{order_id}@example.com" if email is None else email,
            "occurred_at": _NOW_MS,
            **more,
        }
    )


def test_duplicates_and_out_of_order_events_make_one_row_per_order(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    a1, b1, c1 = (_order(o, f"evt-{o}-1") for o in ("A", "B", "C"))
    a_redo = _order("A", "evt-A-2", total="9.99")  # the order service emitted A again
    records = [(b"A", a1), (b"A", a1), (b"C", c1), (b"A", a1), (b"B", b1), (b"A", a_redo)]
    _produce(settings.kafka_bootstrap, _topic(intake_env), records)
    port = _free_port()
    intake = start_intake(MAILBUS_METRICS_PORT=str(port))
    _wait_for_rows(settings.database_url, 3, intake, _STARTUP_S)
    _wait_until_committed(settings, _topic(intake_env))
    _produce(settings.kafka_bootstrap, _topic(intake_env), [(b"B", b1), (b"C", c1)])
    _wait_until_committed(settings, _topic(intake_env))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert intake.stop() == 0, intake.output()

    assert 'mailbus_intake_events_total{outcome="inserted"} 3.0' in metrics
    assert 'mailbus_intake_events_total{outcome="duplicate"} 5.0' in metrics
    assert re.search(r'mailbus_intake_lag\{partition="\d+"\} 0\.0', metrics)  # all read

    rows = _rows(settings.database_url)
    assert sorted(rows) == ["order-A-confirmation", "order-B-confirmation", "order-C-confirmation"]
    to, template, priority, payload = rows["order-A-confirmation"]
    assert (to, template, priority) == ("buyer-A@example.com", "order_confirmation", "p1")
    assert payload["event_id"] == "evt-A-1" and payload["total"] is None  # the first one won
    occurred = datetime.fromtimestamp(_NOW_MS / 1000, UTC)
    assert payload["occurred_at"] == occurred.isoformat()
    assert "intake stopped: 8 events" in intake.output()


def test_undecodable_and_invalid_events_go_to_the_intake_dlq_and_the_next_is_processed(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    topic = _topic(intake_env)
    malformed = b"\x00\x01 definitely not avro"
    no_email = _order("N", "evt-N", email="")
    bad_address = _order("X", "evt-X", email="not an address")
    crlf = _order("Y", "evt-Y", customer_name="Yan\r\nBcc: all@example.com")
    records = [
        (b"M", malformed),
        (b"N", no_email),
        (b"X", bad_address),
        (b"Y", crlf),
        (b"OK", _order("OK", "evt-OK")),
    ]
    offsets = _produce(settings.kafka_bootstrap, topic, records)
    intake = start_intake()
    _wait_for_rows(settings.database_url, 1, intake, _STARTUP_S)
    letters = read_messages(settings.kafka_bootstrap, [settings.intake_dlq_topic], 4, 30)
    _wait_until_committed(settings, topic)
    assert intake.stop() == 0, intake.output()

    assert list(_rows(settings.database_url)) == ["order-OK-confirmation"]
    assert len(letters) == 4
    by_key = {letter.key: letter for letter in letters}
    expected = {
        b"M": (
            malformed,
            offsets[0],
            b"intake_undecodable",
            b"not an Avro single-object encoded value",
        ),
        b"N": (no_email, offsets[1], b"intake_invalid", b"OrderPlaced: customer_email: is missing"),
        b"X": (
            bad_address,
            offsets[2],
            b"intake_invalid",
            b"OrderPlaced: customer_email: is not a",
        ),
        b"Y": (crlf, offsets[3], b"intake_invalid", b"OrderPlaced: customer_name: contains CR"),
    }
    for key, (value, offset, reason, error) in expected.items():
        letter = by_key[key]
        headers = dict(letter.headers)
        assert letter.value == value  # the raw bytes, untouched
        assert headers["trace"] == b"t"  # the original headers are kept
        assert headers["mailbus.dlq.reason"] == reason
        assert (headers["mailbus.dlq.error"] or b"").startswith(error), headers
        assert headers["mailbus.dlq.original.topic"] == topic.encode()
        assert headers["mailbus.dlq.original.partition"] == b"0"
        assert headers["mailbus.dlq.original.offset"] == str(offset).encode()
        assert b"all@example.com" not in (headers["mailbus.dlq.error"] or b"")

    # The same letters in the table, for `mailbus dlq list/show`, not for the relay.
    reasons = "intake_undecodable,intake_invalid"
    listed = run_mailbus("dlq", "list", "--reason", reasons, "--json", env=intake_env)
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert sorted(entry["reason"] for entry in entries) == [
        "intake_invalid",
        "intake_invalid",
        "intake_invalid",
        "intake_undecodable",
    ]
    undecodable = next(e for e in entries if e["reason"] == "intake_undecodable")
    shown = run_mailbus("dlq", "show", str(undecodable["id"]), "--json", env=intake_env)
    assert shown.returncode == 0, shown.stderr
    letter_row = json.loads(shown.stdout)["dead_letter"]
    assert bytes.fromhex(letter_row["original_value"]) == malformed
    assert (letter_row["original_topic"], letter_row["original_offset"]) == (topic, offsets[0])
    assert letter_row["published_at"] is not None  # the relay leaves it alone

    # Read again from the start (a replay after a crash): no second letter, no second row.
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": f"{settings.topic_prefix}-intake",
        }
    )
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()
    again = start_intake()
    time.sleep(1)
    _wait_until_committed(settings, topic)
    assert again.stop() == 0, again.output()
    assert again.output().count("intake stopped: 5 events") == 2  # both runs read all five
    with psycopg.connect(settings.database_url) as conn:
        row = conn.execute("SELECT count(*) FROM email_dead_letters").fetchone()
    assert row == (4,)
    assert list(_rows(settings.database_url)) == ["order-OK-confirmation"]


def test_offsets_do_not_pass_a_batch_whose_transaction_failed_even_when_stopped(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    topic = _topic(intake_env)
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON email_sends"
            " FOR EACH STATEMENT EXECUTE FUNCTION refuse()"
        )
    _produce(settings.kafka_bootstrap, topic, [(b"R", _order("R", "evt-R"))])
    intake = start_intake()
    deadline = time.monotonic() + _STARTUP_S
    while "refused by the test" not in intake.output():
        assert time.monotonic() < deadline, intake.output()
        time.sleep(0.2)
    time.sleep(3)  # several retries and faust commit intervals (1 s) go by
    assert _committed(settings, topic, settings.partitions) == [-1001] * settings.partitions
    assert _count(settings.database_url) == 0
    assert intake.stop() == 0, intake.output()  # SIGTERM while retrying: a clean stop
    assert _committed(settings, topic, settings.partitions) == [-1001] * settings.partitions
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER refuse ON email_sends")
    intake = start_intake()
    _wait_for_rows(settings.database_url, 1, intake, _STARTUP_S)
    _wait_until_committed(settings, topic)
    assert intake.stop() == 0, intake.output()


def test_sigkill_mid_stream_then_restart_gives_exactly_one_row_per_order(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    topic = _topic(intake_env)
    count = 20_000  # the figure
    records = list(sample_events(count, duplicates=1000, malformed=0, run="kill"))
    chunks = [records[start : start + 1000] for start in range(0, len(records), 1000)]

    def publish() -> None:  # events keep arriving while the intake is killed and restarted
        for chunk in chunks:
            publish_records(settings, topic, iter(chunk))
            time.sleep(0.15)

    publisher = threading.Thread(target=publish)
    publisher.start()
    chosen = random.Random(9)
    at_kill: list[int] = []
    try:
        for threshold in (chosen.randint(1500, 6000), chosen.randint(9000, 14000)):
            intake = start_intake(MAILBUS_INTAKE_BATCH="100")
            while _count(settings.database_url) < threshold:
                assert intake.process.poll() is None, intake.output()
                time.sleep(0.02)
            assert intake.stop(signal.SIGKILL) == -signal.SIGKILL
            at_kill.append(_count(settings.database_url))
    finally:
        publisher.join()
    assert all(0 < rows < count for rows in at_kill), at_kill  # killed mid-stream, twice
    intake = start_intake()
    _wait_for_rows(settings.database_url, count, intake, 120)
    _wait_until_committed(settings, topic, timeout=60)
    assert intake.stop() == 0, intake.output()

    keys = set(_rows(settings.database_url))
    assert keys == {f"order-{record.order_id}-confirmation" for record in records}
    assert _count(settings.database_url) == count


def _catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``sig`` (/proc's SigCgt)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    return False


def test_a_sigterm_while_it_starts_stops_it(intake_env: dict[str, str], tmp_path: Path) -> None:
    # SIGTERM as soon as the command line handles it, long before faust's worker takes the
    # signals: it only set the command line's stop event, and the intake ran on (the
    # schema guard's own SIGTERM too, under CI's load: test_schema_version.py).
    intake = Intake(intake_env, tmp_path / "intake.log")
    deadline = time.monotonic() + _STARTUP_S
    while not _catches(intake.process.pid, signal.SIGTERM):
        assert intake.process.poll() is None, intake.output()
        assert time.monotonic() < deadline, intake.output()
        time.sleep(0.005)
    try:
        assert intake.stop(timeout=30) == 0, intake.output()
    except subprocess.TimeoutExpired:
        intake.process.kill()
        raise AssertionError(f"still running 30 s after SIGTERM:\n{intake.output()}") from None


def test_a_bad_mappings_file_exits_2_naming_the_setting(
    intake_env: dict[str, str], tmp_path: Path
) -> None:
    bad = tmp_path / "mappings.json"
    bad.write_text('{"mappings": [{"event": "OrderPlaced"}]}')
    done = run_mailbus("intake", env={**intake_env, "MAILBUS_INTAKE_MAPPINGS": str(bad)})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "mailbus: configuration error: MAILBUS_INTAKE_MAPPINGS: mappings[0] ('OrderPlaced'):"
        " 'schema' must be a non-empty string"
    ]


def test_publish_sample_publishes_valid_events_duplicates_and_one_malformed(
    settings: Settings, intake_env: dict[str, str]
) -> None:
    done = run_mailbus("intake", "publish-sample", "--count", "20", env=intake_env)
    assert done.returncode == 0, done.stderr
    assert "20 orders" in done.stdout and "3 duplicates, 1 malformed" in done.stdout
    landed = read_messages(settings.kafka_bootstrap, [_topic(intake_env)], 24, 30)
    assert len(landed) == 24
    decoded = []
    for message in landed:
        try:
            decoded.append(order_placed_codec().decode(message.value)["order_id"])
        except Exception:
            decoded.append(None)
    assert decoded.count(None) == 1
    assert len({order for order in decoded if order}) == 20


def test_an_intake_started_before_its_topic_exists_reads_it_soon_after_it_is_created(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    """On a fresh broker the domain topic may appear after the intake started (`make demo`
    did exactly that): the intake must not wait for its consumer's next metadata refresh,
    five minutes by default, before it reads the topic."""
    topic = f"{settings.topic_prefix}.orders.later"
    intake = start_intake(MAILBUS_INTAKE_TOPIC=topic)
    time.sleep(3)  # starting: it joins its group while the broker does not have the topic
    create_topics(settings, [topic])
    _produce(settings.kafka_bootstrap, topic, [(b"L", _order("L", "evt-L-1"))])
    _wait_for_rows(settings.database_url, 1, intake, 45)
    assert intake.stop() == 0, intake.output()
    assert sorted(_rows(settings.database_url)) == ["order-L-confirmation"]
