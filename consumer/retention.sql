-- Named queries of `mailbus retention run` (consumer/retention.py, docs/retention.md).
-- What may go is stated once, by the *_past_retention views (0028_retention_views.sql),
-- under the transaction's mailbus.retention_s. %(batch)s: rows per transaction.
-- FOR UPDATE SKIP LOCKED: a row a consumer or an operator holds is left for the next run,
-- and a row changed meanwhile is checked again against the view's conditions once locked.

-- name: window
SELECT set_config('mailbus.retention_s', %(retention_s)s, true)

-- name: prune_sends
-- One batch of sends, with their dead letters and those letters' replays (attempts and
-- resolutions go by ON DELETE CASCADE). Each deleted send counts one more life of its
-- dedupe key in email_key_lives, in the same transaction (a trigger: migration 0048), so
-- the key enqueued again is a new mail under a key of its own.
WITH doomed AS (
    SELECT id FROM email_sends_past_retention
    ORDER BY updated_at LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), letters AS (
    SELECT d.id FROM email_dead_letters d JOIN doomed ON d.send_id = doomed.id
), replays_gone AS (
    DELETE FROM email_replays r USING letters WHERE r.dead_letter_id = letters.id
), letters_gone AS (
    DELETE FROM email_dead_letters d USING letters WHERE d.id = letters.id
)
DELETE FROM email_sends s USING doomed WHERE s.id = doomed.id

-- name: prune_dead_letters
WITH doomed AS (
    SELECT id FROM email_dead_letters_past_retention
    ORDER BY created_at LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), replays_gone AS (
    DELETE FROM email_replays r USING doomed WHERE r.dead_letter_id = doomed.id
)
DELETE FROM email_dead_letters d USING doomed WHERE d.id = doomed.id

-- name: prune_delivery_events
WITH doomed AS (
    SELECT provider, event_id FROM delivery_events_past_retention
    ORDER BY received_at LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM delivery_events e USING doomed
WHERE e.provider = doomed.provider AND e.event_id = doomed.event_id

-- name: count_sends
SELECT count(*) FROM email_sends_past_retention

-- name: count_dead_letters
SELECT count(*) FROM email_dead_letters_past_retention

-- name: count_delivery_events
SELECT count(*) FROM delivery_events_past_retention
