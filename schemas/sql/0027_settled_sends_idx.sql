-- mailbus: online (CREATE INDEX CONCURRENTLY: enqueues and claims go on while it builds)
-- What `mailbus retention run` scans (docs/retention.md): settled sends, oldest change
-- first. Partial, so it holds settled rows only and the hot open rows never touch it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS email_sends_settled_idx ON email_sends (updated_at, id)
    WHERE status IN ('accepted', 'failed', 'expired', 'suppressed');
