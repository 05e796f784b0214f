-- Named queries of `mailbus retention run` (consumer/retention.py, docs/retention.md).
-- The retention role holds no DELETE grant: it deletes and counts only through SECURITY
-- DEFINER functions, each refusing a window under its table's floor (retention_floors).
-- %(batch)s: rows per transaction.

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
-- The run's record in retention_runs, which the relay's metrics read: the database's own
-- figures (0064_retention_floors.sql), never this process's; it returns what each table
-- has past its floor now, and how long the oldest has been past it.
SELECT kind, left_rows, left_s FROM mailbus_retention_report()

-- name: floors
-- Each table's floor: the least window its pruning function takes.
SELECT what, floor_s FROM retention_floors

-- name: set_floor
-- `retention floors --set`, as the operator: a table's floor pinned to its window.
UPDATE retention_floors SET floor_s = %(floor_s)s WHERE what = %(what)s
