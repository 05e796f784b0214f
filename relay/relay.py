"""`mailbus relay`: publishes committed outbox rows to Kafka, never losing one.

One pass (:meth:`Relay.publish_due_batch`) runs in one transaction:

1. claim up to N due rows (``FOR UPDATE SKIP LOCKED``) and mark them published;
2. publish a pointer per row to ``{prefix}.send.{priority}``, keyed by dedupe key;
3. wait for Kafka's acknowledgements; un-mark the rows Kafka did not take;
4. commit.

A crash anywhere before the commit rolls the marks back, so the rows are claimed again:
at-least-once onto Kafka, made harmless by the consumer's guarded claim. Several relays
can run at once; SKIP LOCKED hands each its own rows (no leader election needed).
Between passes the relay sleeps until a NOTIFY from the insert trigger, the next row's
``next_try_at``, or the polling interval, whichever comes first.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import psycopg

from mailbus.settings import Settings
from mailbus.sqlfiles import load_queries
from relay.publisher import OutgoingMessage, PointerPublisher, PublishError
from schemas.codec import SendPointer, send_pointer_codec

__all__ = ["NOTIFY_CHANNEL", "Relay", "RelayStats"]

NOTIFY_CHANNEL = "mailbus_outbox"
log = logging.getLogger("mailbus.relay")


@dataclass
class RelayStats:
    published: int = 0
    batches: int = 0
    unacknowledged: int = 0


class Relay:
    def __init__(self, settings: Settings, publisher: PointerPublisher | None = None) -> None:
        self.settings = settings
        self.stats = RelayStats()
        self._publisher = publisher or PointerPublisher(settings.kafka_bootstrap)
        self._queries = load_queries("relay", "queries.sql")
        self._codec = send_pointer_codec()
        self._conn: psycopg.Connection | None = None
        self._listener: psycopg.Connection | None = None

    def run(self, stop: threading.Event) -> None:
        """Publish until ``stop`` is set; survives PostgreSQL and Kafka outages."""
        reconnect_delay = 0.5
        while not stop.is_set():
            try:
                self._connect()
                while not stop.is_set():
                    if self.publish_due_batch(stop) < self.settings.relay_batch_size:
                        self._wait_for_work(stop)
                reconnect_delay = 0.5
            except psycopg.OperationalError as exc:
                log.warning("database unavailable, retrying in %.1fs: %s", reconnect_delay, exc)
                self._disconnect()
                stop.wait(reconnect_delay)
                reconnect_delay = min(reconnect_delay * 2, 10.0)
            except PublishError as exc:
                log.error("producer failed, recreating it: %s", exc)
                self._publisher = PointerPublisher(self.settings.kafka_bootstrap)
        self._disconnect()
        self._publisher.close()

    def publish_due_batch(self, stop: threading.Event) -> int:
        """One claim-publish-commit pass; returns the number of rows claimed."""
        conn = self._require_connection()
        with conn.transaction():
            rows = conn.execute(
                self._queries["claim_due"], {"limit": self.settings.relay_batch_size}
            ).fetchall()
            if not rows:
                return 0
            messages = [
                OutgoingMessage(
                    topic=self.settings.topic(priority),
                    key=dedupe_key.encode(),
                    value=self._codec.encode(
                        SendPointer.of(send_id, dedupe_key, priority, attempts, created_at)
                    ),
                )
                for send_id, dedupe_key, priority, attempts, created_at in rows
            ]
            failed = self._publisher.publish(messages, stop)
            if failed:
                conn.execute(self._queries["unclaim"], {"ids": [rows[i][0] for i in failed]})
                log.warning("kafka did not acknowledge %d of %d pointers", len(failed), len(rows))
        self.stats.batches += 1
        self.stats.published += len(rows) - len(failed)
        self.stats.unacknowledged += len(failed)
        if failed:
            stop.wait(1.0)  # Kafka is struggling: do not spin on the same rows
        return len(rows)

    def _wait_for_work(self, stop: threading.Event) -> None:
        conn = self._require_connection()
        timeout = self.settings.relay_poll_interval
        row = conn.execute(self._queries["seconds_until_next_due"]).fetchone()
        if row is not None and row[0] is not None:
            timeout = max(0.0, min(timeout, float(row[0])))
        assert self._listener is not None
        deadline = time.monotonic() + timeout
        # Short slices so SIGTERM is honoured promptly.
        while not stop.is_set() and (remaining := deadline - time.monotonic()) > 0:
            if any(
                True for _ in self._listener.notifies(timeout=min(remaining, 0.25), stop_after=1)
            ):
                return

    def _connect(self) -> None:
        if self._conn is None:
            self._conn = psycopg.connect(
                self.settings.database_url, autocommit=True, connect_timeout=5
            )
        if self._listener is None:
            self._listener = psycopg.connect(
                self.settings.database_url, autocommit=True, connect_timeout=5
            )
            self._listener.execute(f"LISTEN {NOTIFY_CHANNEL}")

    def _require_connection(self) -> psycopg.Connection:
        if self._conn is None:
            self._connect()
        assert self._conn is not None
        return self._conn

    def _disconnect(self) -> None:
        for conn in (self._conn, self._listener):
            if conn is not None:
                conn.close()
        self._conn = self._listener = None
