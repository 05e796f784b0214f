"""The reputation guard at work: measure the window's rates in PostgreSQL, ask
:func:`mailbus.campaigns.reputation.decide`, and pause the campaigns it names.

The relay's campaign pacer runs :meth:`ReputationGuard.maybe_check` between its rounds,
every ``MAILBUS_REPUTATION_INTERVAL`` seconds. A round holds a transaction-scoped advisory
lock (``guard_lock``), so of several relay processes one checks at a time and the others
skip their round. A pause goes through :func:`mailbus.campaigns.store.transition`, the path
of ``mailbus campaign pause``: it waits for a pacer tick's row lock and holds the
campaign's queued rows back, so once it returns no more of its mail is sent. The reason is
stored (``campaigns.paused_reason``) and shown by ``status`` and the console; a resume
clears it and restarts the campaign's window.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from mailbus.campaigns.errors import CampaignError
from mailbus.campaigns.reputation import Pause, Rates, Thresholds, decide
from mailbus.campaigns.store import transition
from mailbus.kernel.metrics import observe_reputation
from mailbus.kernel.settings import Settings
from mailbus_client.sqlfiles import load_queries

__all__ = ["Measured", "ReputationGuard"]

log = logging.getLogger("mailbus.campaigns")


@dataclass(frozen=True)
class Measured:
    since: datetime  # the window's start (PostgreSQL's clock)
    providers: list[Rates]
    campaigns: list[tuple[Rates, str]]  # each campaign's rates through a provider, its state


class ReputationGuard:
    def __init__(
        self,
        database_url: str,
        *,
        thresholds: Thresholds,
        window_s: float,
        primary: str,
        interval_s: float,
    ) -> None:
        self.database_url = database_url
        self.thresholds = thresholds
        self.window_s = window_s
        self.primary = primary  # the provider of rows whose provider column is NULL
        self.interval_s = interval_s
        self._next_at: float | None = None  # monotonic time of the next check
        self._queries = load_queries("mailbus.campaigns", "reputation.sql")

    @classmethod
    def of(cls, settings: Settings) -> ReputationGuard:
        return cls(
            settings.database_url,
            thresholds=Thresholds(
                settings.reputation_bounce_rate,
                settings.reputation_complaint_rate,
                settings.reputation_min_sends,
            ),
            window_s=settings.reputation_window,
            primary=settings.provider,
            interval_s=settings.reputation_interval,
        )

    def measure(self, conn: psycopg.Connection[Any]) -> Measured:
        q = self._queries
        row = conn.execute(q["window_start"], {"window_s": self.window_s}).fetchone()
        assert row is not None
        since = row[0]
        params = {"since": since, "primary": self.primary}
        providers = [
            Rates(provider, None, int(sent), int(bounced), int(complained))
            for provider, sent, bounced, complained in conn.execute(q["provider_rates"], params)
        ]
        campaigns = [
            (Rates(provider, int(cid), int(sent), int(bounced), int(complained)), state)
            for cid, state, provider, sent, bounced, complained in conn.execute(
                q["campaign_rates"], params
            )
        ]
        return Measured(since, providers, campaigns)

    def check(self, conn: psycopg.Connection[Any]) -> list[Pause] | None:
        """One round (``conn`` in autocommit mode): the pauses it made, or None when
        another process holds the round."""
        with conn.transaction():
            locked = conn.execute(self._queries["guard_lock"]).fetchone()
            if locked is None or not locked[0]:
                return None
            measured = self.measure(conn)
            running = [rates for rates, state in measured.campaigns if state == "running"]
            pauses = decide(running, self.thresholds)
            # Under the lock, so two processes never pause the same campaign twice.
            made = [p for p in pauses if self._pause(p)]
        observe_reputation(
            [(r.provider, r.sent, r.bounce_rate, r.complaint_rate) for r in measured.providers],
            len(made),
        )
        return made

    def _pause(self, pause: Pause) -> bool:
        try:
            said, held = transition(
                self.database_url, pause.campaign_id, "pause", reason=pause.reason
            )
        except CampaignError:  # finished or cancelled meanwhile
            return False
        if said.endswith(" is paused"):
            log.warning(
                "campaign %d paused by the reputation guard (%d queued rows held back): %s",
                pause.campaign_id, held, pause.reason,
            )  # fmt: skip
            return True
        return False  # paused or ended meanwhile

    def maybe_check(self, conn: psycopg.Connection[Any], monotonic_now: float) -> None:
        """Check when the interval has passed since the last check (at once the first
        time)."""
        if self._next_at is not None and monotonic_now < self._next_at:
            return
        self._next_at = monotonic_now + self.interval_s
        self.check(conn)

