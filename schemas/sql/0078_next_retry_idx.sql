-- mailbus: online
-- The relay's look-up of the next retry coming due (relay/queries.sql,
-- seconds_until_next_due) reads one entry of this index. It walked the relay's due rows
-- instead (email_sends_relay_due_idx holds them all, of every priority, and only the heap
-- says which have a next_try_at), so while a campaign's backlog waited to be published an
-- idle P0 lane spent its time in that walk before each sleep, and a P0 row committed
-- meanwhile waited for it (issue 37). Only rows with a next_try_at are entered: retries,
-- scheduled sends and a paused campaign's held rows; a first attempt never is. Built with
-- CREATE INDEX CONCURRENTLY, so enqueues go on while it builds (docs/runbook.md#upgrades).
CREATE INDEX CONCURRENTLY IF NOT EXISTS email_sends_next_retry_idx
    ON email_sends (next_try_at)
    WHERE status = 'pending' AND published_at IS NULL AND next_try_at IS NOT NULL;
