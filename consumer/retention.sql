-- Named queries of `mailbus retention run` (consumer/retention.py, docs/retention.md).
-- The retention role holds no DELETE grant: it deletes and counts only through SECURITY
-- DEFINER functions, each refusing a window under a day. %(batch)s: rows per transaction.

-- name: prune
-- One batch of mail, by mailbus_prune (0057_retention_prune_function.sql) under the
-- *_past_retention views (0028). %(what)s: 'sends' (with their dead letters and those
-- letters' replays; attempts and resolutions go by ON DELETE CASCADE; each deleted send
-- counts one more life of its dedupe key in email_key_lives, a trigger of migration 0048),
-- 'dead letters' (of no send), 'delivery events'.
SELECT mailbus_prune(%(what)s, %(window_s)s, %(batch)s)

-- name: prune_history
-- One batch by mailbus_prune_history (0062_retention_history_and_runs.sql): 'campaign
-- recipients' of an ended campaign, 'campaigns' ended and without recipients, 'console audit'.
SELECT mailbus_prune_history(%(what)s, %(window_s)s, %(batch)s)

-- name: backlog
-- Rows of %(what)s past the window now (at most %(cap)s counted), and how long the oldest
-- has been past it.
SELECT backlog_rows, overdue_s FROM mailbus_retention_backlog(%(what)s, %(window_s)s, %(cap)s)

-- name: report
-- The run's record in retention_runs, which the relay's metrics read.
SELECT mailbus_retention_report(%(complete)s, %(deleted)s, %(backlog)s, %(overdue_s)s)
