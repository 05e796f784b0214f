"""The campaign pacer: hands recipients out as ``email_sends`` rows, at each campaign's pace.

One tick of one campaign is one transaction: lock the campaign row (``FOR UPDATE``: two
pacers never pace the same campaign at once, the second waits), ask :func:`plan_tick` how many
recipients the pace allows, write their rows (``ON CONFLICT (dedupe_key) DO NOTHING``, the
suppressed marked instead), and advance the checkpoint and the bucket. A crash before the
commit undoes all of it, so no recipient is skipped or written twice; the unique dedupe
key is the second guard. ``pause``/``cancel`` wait for that row lock, so once they return
no further row of the campaign is written (and, in the same transaction, the campaign's
queued rows not yet offered to a provider are held back or expired: ``store.transition``).

Under a daily quota across campaigns (``MAILBUS_CAMPAIGN_DAILY_QUOTA``) a round of ticks is
one transaction instead: it takes a transaction-scoped advisory lock (so the pacers of
several relay processes take their rounds one at a time), counts what every campaign
handed out today, locks and plans every running campaign, and splits what is left of
the quota max-min fairly (:func:`mailbus.campaigns.pacing.fair_shares`) among the campaigns'
paced demands. Recipients handed out (rows created plus the suppressed) count.

Campaign mail goes out at its own priority, ``p2`` unless created otherwise, through its
own topic and consumer group: a draining campaign never holds back P0/P1 mail.

Rows are created as the pace allows (not up front with a schedule): pausing or cancelling
updates one campaign row and the few rows already queued, not a million scheduled ones.

Campaign rows get what the enqueue helper gives other mail: the template's policy expiry
(``expire_after_s`` of ``MAILBUS_POLICY_FILE``, counted from the row's creation) and the
queue cap (``MAILBUS_QUEUE_CAP``): a tick hands out no more rows than the cap admits for
the campaign's priority now, and the campaign waits (``limited_by`` "queue") while the
queue is full.

``mailbus relay`` runs :func:`start_pacer_thread` beside the relay loop, with the
reputation guard (:mod:`mailbus.campaigns.guard`) checked between its rounds; ``mailbus
campaign run ID`` runs :meth:`Pacer.run` in the foreground for one campaign.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from mailbus.campaigns.guard import ReputationGuard
from mailbus.campaigns.pacing import Bucket, Grant, Pace, Window, fair_shares, plan_tick, settle
from mailbus.campaigns.unsubscribe import Links, hmac_pads
from mailbus.kernel import health, schema_guard
from mailbus.kernel.errors import StorageError
from mailbus.kernel.settings import Settings
from mailbus_client.policies import PolicyBook, QueueCap, configured_policy_book
from mailbus_client.sqlfiles import load_queries

__all__ = [
    "MAX_BATCH",
    "PACER_COMPONENT",
    "PACER_RETRY_AFTER_ERROR_S",
    "Pacer",
    "TickResult",
    "start_pacer_thread",
    "wait_after",
]

MAX_BATCH = 20_000  # recipients per transaction: a bigger grant is cut into several ticks
IMPORT_WAIT_S = 0.1  # a tick that handed out every recipient imported so far waits this
# long for the import's next part, not a whole tick
PACER_COMPONENT = "campaign-pacer"  # its readiness in /readyz (mailbus.kernel.health)
PACER_RETRY_AFTER_ERROR_S = 60.0
# a pacer that has not come round its loop for this long (hung on a lock or a black-holed
# database) is not ready, as a relay lane is not
PACER_HEARTBEAT_S = 60.0
log = logging.getLogger("mailbus.campaigns")


@dataclass(frozen=True)
class _Planned:
    campaign_id: int
    template: str
    priority: str
    checkpoint: int
    left: int  # recipients not yet handed out (of those imported so far)
    recipients: int  # imported so far
    importing: bool  # more recipients may come: the campaign cannot finish yet
    grant: Grant


@dataclass(frozen=True)
class TickResult:
    campaign_id: int
    handed_out: int  # recipients handled: rows created (or found) plus suppressed
    created: int  # new email_sends rows
    suppressed: int
    finished: bool  # handed out, and its last mail final: the campaign is now finished
    # see pacing.Grant ("batch": more is owed at once), or "quota", "queue" (the queue cap),
    # "import" (waits for the import's next part), or "delivery" (every recipient handed
    # out, some of its mail not yet final)
    limited_by: str
    recipients: int = 0  # the campaign's recipients imported so far
    fanned_out: bool = False  # every recipient handed out, the import complete


class Pacer:
    def __init__(
        self,
        database_url: str,
        *,
        only: int | None = None,
        tick_s: float = 1.0,
        max_batch: int = MAX_BATCH,
        links: Links | None = None,
        daily_quota: int | None = None,
        policies: PolicyBook | None = None,
        queue_cap: QueueCap | None = None,
        guard: ReputationGuard | None = None,
    ) -> None:
        self.guard = guard  # checked between rounds (the relay's pacer)
        self.database_url = database_url
        self.daily_quota = daily_quota  # recipients per UTC day, all campaigns together
        # As the enqueue helper's: MAILBUS_POLICY_FILE (or the shipped book), MAILBUS_QUEUE_CAP.
        self._policies = configured_policy_book() if policies is None else policies
        self._queue_cap = QueueCap.from_environ() if queue_cap is None else queue_cap
        # Unsubscribe links in every row's variables (None: no secret, no links).
        inner, outer = hmac_pads(links.secret) if links is not None else (None, None)
        self._links = {
            "unsub_base": None if links is None else links.base_url,
            "unsub_inner": inner,
            "unsub_outer": outer,
        }
        self.only = only  # pace this campaign alone (``campaign run``)
        self.tick_s = tick_s
        self.max_batch = max_batch
        self._queries = load_queries("mailbus.campaigns", "queries.sql")

    def tick(self, conn: psycopg.Connection[Any], campaign_id: int) -> TickResult | None:
        """One transaction for one campaign; None when it is not running or another pacer
        holds it. ``conn`` must be in autocommit mode (the transaction is this call's).
        Ignores the daily quota: :meth:`tick_all` applies it."""
        with conn.transaction():
            planned = self._plan(conn, campaign_id)
            if planned is None:
                return None
            return self._apply(conn, planned, planned.grant.rows, planned.grant.limited_by)

    def _plan(self, conn: psycopg.Connection[Any], campaign_id: int) -> _Planned | None:
        """Lock a running campaign's row and ask its pace how many recipients it may hand
        out now (inside the caller's transaction)."""
        row = conn.execute(self._queries["lock_running"], {"id": campaign_id}).fetchone()
        if row is None:
            return None
        (
            template,
            priority,
            rate,
            w_start,
            w_end,
            daily_cap,
            warmup,
            checkpoint,
            tokens,
            last_tick_at,
            day,
            day_count,
            started_on,
            now,
            left,  # recipients not yet handed out
            recipients,
            importing,
        ) = row
        window = None if w_start is None or w_end is None else Window(w_start, w_end)
        pace = Pace(rate, window, daily_cap, tuple(warmup or ()))
        grant = plan_tick(
            pace,
            Bucket(tokens, last_tick_at, day, day_count),
            now,
            started_on or now.date(),
            self.max_batch,
        )
        return _Planned(
            campaign_id, template, priority, checkpoint, left, recipients, importing, grant
        )

    def _apply(
        self, conn: psycopg.Connection[Any], planned: _Planned, rows: int, limited_by: str
    ) -> TickResult:
        """Hand out ``rows`` (<= the grant) recipients of a planned campaign, and advance
        its checkpoint and bucket, in the caller's transaction."""
        q = self._queries
        handed_out = created = suppressed = 0
        last = planned.checkpoint
        rows, limited_by = self._within_queue_cap(conn, planned.priority, rows, limited_by)
        if rows > 0:
            conn.execute(q["tick_settings"])
            out = conn.execute(
                q["fan_out"],
                {
                    "id": planned.campaign_id,
                    "after": planned.checkpoint,
                    "limit": rows,
                    "template": planned.template,
                    "priority": planned.priority,
                    "expire_after_s": self._policies.for_template(planned.template).expire_after_s,
                    **self._links,
                },
            ).fetchone()
            assert out is not None
            handed_out, last_ordinal, suppressed, created = out
            last = planned.checkpoint if last_ordinal is None else last_ordinal
        # Handed out when the list ran out, or the last recipient just went (no idle tick);
        # never while the audience is still being imported: the list may only wait for a
        # part. Finished only once its last mail is final: until then pause, resume and
        # cancel still apply to its rows.
        ran_out = rows > 0 and handed_out < rows
        fanned_out = not planned.importing and (ran_out or handed_out >= planned.left)
        finished = fanned_out and not self._open_mail(conn, planned.campaign_id)
        if planned.importing and ran_out:
            limited_by = "import"
        if fanned_out and not finished:
            limited_by = "delivery"
        bucket = settle(planned.grant, handed_out)
        conn.execute(
            q["record_tick"],
            {
                "id": planned.campaign_id,
                "checkpoint": last,
                "handed_out": handed_out,
                "created": created,
                "suppressed": suppressed,
                "tokens": bucket.tokens,
                "last_tick_at": bucket.last_tick_at,
                "day": bucket.day,
                "day_count": bucket.day_count,
                "finished": finished,
            },
        )
        return TickResult(
            planned.campaign_id,
            handed_out,
            created,
            suppressed,
            finished,
            limited_by,
            planned.recipients,
            fanned_out,
        )

    def _open_mail(self, conn: psycopg.Connection[Any], campaign_id: int) -> bool:
        row = conn.execute(self._queries["open_mail"], {"id": campaign_id}).fetchone()
        return row is not None and bool(row[0])

    def _within_queue_cap(
        self, conn: psycopg.Connection[Any], priority: str, rows: int, limited_by: str
    ) -> tuple[int, str]:
        """``rows``, or fewer: as many as the queue cap admits for ``priority`` now."""
        threshold = self._queue_cap.threshold(priority)
        if threshold is None or rows == 0:
            return rows, limited_by
        row = conn.execute(self._queries["open_rows"]).fetchone()
        room = max(0, threshold - (int(row[0]) if row is not None else 0))
        return (rows, limited_by) if rows <= room else (room, "queue")

    def tick_all(self, conn: psycopg.Connection[Any]) -> list[TickResult]:
        """A tick of every running campaign (or of ``only``): one transaction per campaign,
        or, under a daily quota, one transaction for all of them (see the module's doc)."""
        if self.only is not None:
            ids = [self.only]
        else:
            ids = [int(r[0]) for r in conn.execute(self._queries["running_ids"]).fetchall()]
        if self.daily_quota is not None:
            return self._tick_under_quota(conn, ids, self.daily_quota)
        results = []
        for campaign_id in ids:
            result = self.tick(conn, campaign_id)
            if result is not None:
                results.append(result)
        return results

    def _tick_under_quota(
        self, conn: psycopg.Connection[Any], ids: list[int], quota: int
    ) -> list[TickResult]:
        q = self._queries
        with conn.transaction():
            conn.execute(q["quota_lock"])  # every pacer process: one quota round at a time
            row = conn.execute(q["quota_used_today"]).fetchone()
            used = int(row[0]) if row is not None else 0
            plans = [p for p in (self._plan(conn, i) for i in ids) if p is not None]
            shares = fair_shares(quota - used, [p.grant.rows for p in plans])
            return [
                self._apply(
                    conn, p, share, p.grant.limited_by if share == p.grant.rows else "quota"
                )
                for p, share in zip(plans, shares, strict=True)
            ]

    def run(
        self,
        stop: threading.Event,
        *,
        until_idle: bool = False,
        on_tick: Callable[[list[TickResult]], None] | None = None,
    ) -> None:
        """Tick every ``tick_s`` until ``stop`` (or, with ``until_idle``, until no campaign
        of this pacer has recipients left to hand out); survives database outages. Raises
        StorageError when the database refuses a statement (a missing column, a SQL bug):
        retrying would loop for ever. ``on_tick`` hears every round's results (after their
        commit)."""
        delay = 0.5
        while not stop.is_set():
            try:
                with psycopg.connect(self.database_url, autocommit=True, connect_timeout=5) as conn:
                    schema_guard.check(conn)  # a database restored behind the build
                    delay = 0.5
                    while not stop.is_set():
                        started = time.monotonic()
                        results = self.tick_all(conn)
                        if self.guard is not None:
                            self.guard.maybe_check(conn, time.monotonic())
                        if on_tick is not None:
                            on_tick(results)
                        if until_idle and all(r.fanned_out for r in results):
                            return
                        stop.wait(wait_after(results, self.tick_s, time.monotonic() - started))
            except psycopg.OperationalError as exc:  # connection lost, server restarting, ...
                log.warning("campaign pacer: database error, retrying in %.1fs: %s", delay, exc)
                stop.wait(delay)
                delay = min(delay * 2, 10.0)
            except psycopg.Error as exc:  # a statement the database refuses: a retry cannot help
                raise StorageError(f"campaign pacer failed: {type(exc).__name__}: {exc}") from exc


def wait_after(results: list[TickResult], tick_s: float, elapsed_s: float) -> float:
    """Seconds until the next round (pure): none when more is owed at once, a moment when a
    campaign waits for its import's next part, else the rest of the tick."""
    if any(r.limited_by == "batch" for r in results):
        return 0.0
    rest = max(0.0, tick_s - elapsed_s)
    if any(r.limited_by == "import" for r in results):
        return min(rest, IMPORT_WAIT_S)
    return rest


def start_pacer_thread(settings: Settings, stop: threading.Event) -> threading.Thread:
    """The pacer of every running campaign, in a thread of a long-running process (the
    relay); join it after setting ``stop``."""
    pacer = Pacer(
        settings.database_url,
        links=Links.of(settings.unsubscribe_secret, settings.unsubscribe_base_url),
        daily_quota=settings.campaign_daily_quota,
        guard=ReputationGuard.of(settings),
    )
    thread = threading.Thread(
        target=_pace_until_stopped, args=(pacer, stop), name="campaign-pacer", daemon=True
    )
    thread.start()
    return thread


def _pace_until_stopped(pacer: Pacer, stop: threading.Event) -> None:
    """The relay's pacer loop. A statement the database refuses stops pacing, not the relay:
    P0/P1 mail keeps flowing. The error is logged with its traceback and /readyz turns 503
    (a rollout of a broken version stalls); the pacer tries again every
    ``PACER_RETRY_AFTER_ERROR_S``, which is slow enough not to flood the log and heals
    the case of code deployed before its migration. Each round beats its heartbeat, and
    anything else that ends the thread makes it unready at once."""
    heartbeat_s = max(PACER_HEARTBEAT_S, 3 * pacer.tick_s)

    def beat(_results: list[TickResult]) -> None:
        health.mark(PACER_COMPONENT, True, heartbeat_s=heartbeat_s)

    try:
        while not stop.is_set():
            try:
                pacer.run(stop, on_tick=beat)
            except StorageError as exc:
                health.mark(PACER_COMPONENT, False, str(exc))
                log.exception(
                    "campaign pacer stopped, campaigns are not paced; trying again in %.0fs",
                    PACER_RETRY_AFTER_ERROR_S,
                )
                stop.wait(PACER_RETRY_AFTER_ERROR_S)
    except BaseException as exc:
        health.mark(PACER_COMPONENT, False, f"stopped: {type(exc).__name__}: {exc}")
        raise
