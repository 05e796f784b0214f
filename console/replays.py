"""Dead-letter replays started from the console, run in the background.

A replay is what `mailbus dlq replay` does
(:func:`mailbus.consumer.dead_letter_admin.replay_paced`): P0 first, oldest first,
paced, each letter through the guarded claim, so two operators confirming the same replay
at once replay each mail once (the second finds them replayed).
The jobs of this process are kept for the dead-letters page; the console_audit row is
written when a job starts (the mails chosen) and when it ends (the mails replayed).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from mailbus.console import audit
from mailbus.console.access import User
from mailbus.consumer.dead_letter_admin import connect_store, replay_candidates, replay_paced
from mailbus.consumer.dead_letter_views import LetterFilter, replay_summary

__all__ = ["ReplayJob", "ReplayJobs"]


@dataclass
class ReplayJob:
    id: int
    who: str
    what: str  # the filter, in words
    total: int
    done: int = 0
    summary: str = ""  # set when it ends

    @property
    def running(self) -> bool:
        return not self.summary


@dataclass
class ReplayJobs:
    _jobs: list[ReplayJob] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    stop: threading.Event = field(default_factory=threading.Event)

    def recent(self) -> list[ReplayJob]:
        return list(reversed(self._jobs[-20:]))

    def start(
        self,
        database_url: str,
        user: User,
        where: LetterFilter,
        what: str,
        limit: int,
        rate: float | None,
        on_end: Callable[[ReplayJob], None] = lambda job: None,
    ) -> ReplayJob:
        """Choose the letters now (at most ``limit``, what the dry run showed), audit, and
        replay them in a thread. Blocking: call it from a worker thread."""
        with connect_store(database_url) as store:
            chosen, _ = replay_candidates(store, where, limit)
        job = ReplayJob(next(self._ids), user.name, what, len(chosen))
        self._jobs.append(job)
        audit.record(database_url, user, "dlq_replay_started", what, len(chosen))

        def work() -> None:
            try:
                with connect_store(database_url) as store:
                    replayed, skipped = replay_paced(
                        store,
                        chosen,
                        who=f"console:{user.name}",
                        why=f"console replay {job.id}",
                        rate=rate,
                        stop=self.stop,
                        on_done=lambda done: setattr(job, "done", done),
                    )
                job.summary = replay_summary(replayed, skipped)
                audit.record(database_url, user, "dlq_replay", what, replayed, job.summary)
            except Exception as exc:  # the thread's end: say it on the page and in the audit
                job.summary = f"stopped: {exc}"[:300]
                audit.record(database_url, user, "dlq_replay_failed", what, job.done, job.summary)
            on_end(job)

        threading.Thread(target=work, name=f"console-replay-{job.id}", daemon=True).start()
        return job
