-- Named queries of `mailbus dlq list / show / replay` (consumer/dead_letter_admin.py).

-- name: select_letters
-- The dead letters matching the filters (a NULL filter matches everything), newest first,
-- with the send's current status and the number of matches before the limit.
SELECT d.id, d.created_at, d.priority, d.template, d.reason, d.status_code, d.attempts,
       d.dedupe_key, d.error, d.send_id, d.replayed_at, s.status,
       count(*) OVER () AS total
FROM email_dead_letters d
LEFT JOIN email_sends s ON s.id = d.send_id
WHERE (%(reasons)s::text[] IS NULL OR d.reason = ANY(%(reasons)s::text[]))
  AND (%(priorities)s::text[] IS NULL OR d.priority = ANY(%(priorities)s::text[]))
  AND (%(templates)s::text[] IS NULL OR d.template = ANY(%(templates)s::text[]))
  AND (%(since)s::timestamptz IS NULL OR d.created_at >= %(since)s::timestamptz)
  AND (%(include_replayed)s OR d.replayed_at IS NULL)
ORDER BY d.id DESC
LIMIT %(limit)s

-- name: letter_by_id
SELECT id, created_at, priority, template, reason, status_code, attempts, dedupe_key, error,
       send_id, replayed_at, original_topic, original_partition, original_offset,
       published_at
FROM email_dead_letters
WHERE id = %(id)s

-- name: letter_raw
-- The stored Kafka key and value (`dlq show`; never read by the console's role).
SELECT original_key, original_value FROM email_dead_letters WHERE id = %(id)s

-- name: send_by_id
SELECT id, dedupe_key, status, priority, template, attempts, last_error, message_id,
       next_try_at, created_at, updated_at
FROM email_sends
WHERE id = %(id)s

-- name: attempts_of_send
SELECT attempt, at, outcome, status_code, latency_ms, reason
FROM email_attempts
WHERE send_id = %(send_id)s
ORDER BY at, id

-- name: replays_of_letter
SELECT at, replayed_by, db_user, reason, send_id
FROM email_replays
WHERE dead_letter_id = %(id)s
ORDER BY at, id

-- name: mark_replayed
-- Step 1 of a replay: claim the dead letter; nothing if another replay got there first.
-- An intake dead letter (no send row) says so: its stored event is mapped again.
UPDATE email_dead_letters SET replayed_at = now()
WHERE id = %(id)s AND replayed_at IS NULL
RETURNING send_id, reason IN ('intake_undecodable', 'intake_invalid')

-- name: link_send
-- Step 2 of an intake dead letter's replay: the row its event became.
UPDATE email_dead_letters SET send_id = %(send_id)s
WHERE id = %(id)s AND send_id IS NULL

-- name: reset_send
-- Step 2: failed -> pending with a fresh attempt budget, the one edge reserved for replay.
-- A row in any other status (accepted above all) is never touched. Migration 0053's
-- function runs the UPDATE, only for a send whose dead letter step 1 just marked.
SELECT * FROM mailbus_replay_send(%(send_id)s)

-- name: send_status
SELECT status FROM email_sends WHERE id = %(send_id)s

-- name: insert_replay
-- Step 3: the audit row.
INSERT INTO email_replays (dead_letter_id, send_id, replayed_by, reason)
VALUES (%(id)s, %(send_id)s, %(who)s, %(why)s)

-- name: wake_relay
-- The outbox trigger fires on INSERT only; an UPDATE back to pending wakes the relay here.
SELECT pg_notify('mailbus_outbox', '')
