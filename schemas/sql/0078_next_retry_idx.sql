-- mailbus: online
-- The relay's look-up of the next retry coming due (relay/queries.sql,
-- seconds_until_next_due) reads the first entry of this index for each priority its lanes
-- claim. It walked the relay's due rows instead (email_sends_relay_due_idx holds them all,
-- of every priority, and only the heap says which have a next_try_at), so while a
-- campaign's backlog waited to be published an idle P0 lane spent its time in that walk
-- before each sleep, and a P0 row committed meanwhile waited for it (issue 37). Keyed by
-- priority first, so the P0 lane looks up P0 retries alone, never a campaign's. Only rows
-- with a next_try_at that wait to be published are entered (retries, scheduled sends, a
-- paused campaign's held rows and a resumed one's rows until claimed); rows enqueued
-- without one are not.
-- Lock level: CREATE INDEX CONCURRENTLY takes SHARE UPDATE EXCLUSIVE on email_sends, which
-- no INSERT, UPDATE or DELETE waits for: writers never queue behind it. It waits for the
-- transactions open when it starts; meanwhile autovacuum skips email_sends and a manual
-- ANALYZE of it waits (docs/runbook.md#upgrades).
CREATE INDEX CONCURRENTLY IF NOT EXISTS email_sends_next_retry_idx
    ON email_sends (priority, next_try_at)
    WHERE status = 'pending' AND published_at IS NULL AND next_try_at IS NOT NULL;
