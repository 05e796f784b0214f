-- Named queries of `mailbus retention run` (consumer/retention.py, docs/retention.md).
-- What may go is stated once, by the *_past_retention views (0028_retention_views.sql),
-- under the transaction's mailbus.retention_s. %(batch)s: rows per transaction.

-- name: window
SELECT set_config('mailbus.retention_s', %(retention_s)s, true)

-- name: prune
-- One batch of one table, deleted by the SECURITY DEFINER function mailbus_prune
-- (0057_retention_prune_function.sql): the retention role has no DELETE grant. %(what)s:
-- 'sends' (with their dead letters and those letters' replays; attempts and resolutions
-- go by ON DELETE CASCADE; each deleted send counts one more life of its dedupe key in
-- email_key_lives, a trigger of migration 0048), 'dead letters' (of no send), 'delivery events'.
SELECT mailbus_prune(%(what)s, %(retention_s)s, %(batch)s)

-- name: count_sends
SELECT count(*) FROM email_sends_past_retention

-- name: count_dead_letters
SELECT count(*) FROM email_dead_letters_past_retention

-- name: count_delivery_events
SELECT count(*) FROM delivery_events_past_retention
