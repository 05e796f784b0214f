-- name: load_send
SELECT s.id, s.dedupe_key, s.to_address, s.template, s.payload_json, s.priority, s.status,
       s.attempts, s.expires_at, s.next_try_at, s.provider,
       EXISTS (SELECT 1 FROM email_suppressions x WHERE x.address = lower(s.to_address))
FROM email_sends s
WHERE s.id = %(id)s

-- name: claim_for_send
-- pending -> sending, only for the attempt the pointer names and only when due.
UPDATE email_sends
SET status = 'sending', attempts = attempts + 1, lease_token = %(token)s,
    lease_until = now() + make_interval(secs => %(lease_s)s), provider = %(provider)s
WHERE id = %(id)s AND status = 'pending' AND attempts = %(attempt)s
  AND (next_try_at IS NULL OR next_try_at <= now())
RETURNING attempts

-- name: settle
-- Records a decision, guarded: without a lease token the row must still be `pending` at the
-- pointer's attempt (expired, suppressed or invalid, decided before any call); with one it
-- must be `sending` under that token (the holder's call or look-up). The attempt's history
-- row (when a call was made) and the dead letter (when asked) go in the same statement.
WITH settled AS (
    UPDATE email_sends
    SET status = %(status)s,
        next_try_at = %(next_try_at)s,
        last_error = %(last_error)s,
        message_id = coalesce(%(message_id)s, message_id),
        accepted_at = CASE WHEN %(status)s = 'accepted' THEN now() ELSE accepted_at END,
        lease_until = NULL, lease_token = NULL, published_at = NULL
    WHERE id = %(id)s
      AND CASE WHEN %(token)s::uuid IS NULL
               THEN status = 'pending' AND attempts = %(attempt)s
               ELSE status = 'sending' AND lease_token = %(token)s::uuid END
    RETURNING id, dedupe_key, priority, template, attempts
), attempt AS (
    INSERT INTO email_attempts (send_id, attempt, outcome, status_code, reason, latency_ms)
    SELECT id, attempts, %(status)s, %(status_code)s, %(last_error)s, %(latency_ms)s
    FROM settled WHERE %(latency_ms)s::int IS NOT NULL
), dead_letter AS (
    INSERT INTO email_dead_letters (
        send_id, dedupe_key, priority, template, reason, status_code, error, attempts,
        original_topic, original_partition, original_offset)
    SELECT id, dedupe_key, priority, template, %(dl_reason)s, %(status_code)s, %(dl_error)s,
           attempts, %(topic)s, %(partition)s, %(offset)s
    FROM settled WHERE %(dead_letter)s
)
SELECT count(*) FROM settled

-- name: insert_dead_letter
-- An undecodable Kafka message: no send row, the raw bytes kept.
INSERT INTO email_dead_letters (
    send_id, dedupe_key, priority, template, reason, status_code, error, attempts,
    original_topic, original_partition, original_offset, original_key, original_value)
VALUES (
    NULL, NULL, NULL, NULL, 'undecodable', NULL, %(error)s, 0,
    %(topic)s, %(partition)s, %(offset)s, %(key)s, %(value)s)

-- name: take_unresolved
-- Rows whose last call has no known outcome: `unknown` ones that are due, and `sending`
-- ones whose holder's lease ran out (it crashed or hung). Taken with a fresh lease.
UPDATE email_sends
SET status = 'sending', lease_token = %(token)s,
    lease_until = now() + make_interval(secs => %(lease_s)s)
WHERE id IN (
    SELECT id FROM email_sends
    WHERE priority = ANY(%(priorities)s)
      AND ((status = 'sending' AND lease_until < now())
           OR (status = 'unknown' AND (next_try_at IS NULL OR next_try_at <= now())))
    ORDER BY priority, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id, dedupe_key, to_address, template, payload_json, priority, status, attempts,
          expires_at, next_try_at, provider, false

-- name: republish_stale
-- A pending row whose pointer was published long ago but never handled (a pointer lost
-- with a deleted topic, a consumer bug): hand it back to the relay. At most %(limit)s per
-- pass, oldest first, so a backlog that is merely slow is not flooded with copies.
UPDATE email_sends SET published_at = NULL
WHERE id IN (
    SELECT id FROM email_sends
    WHERE status = 'pending' AND priority = ANY(%(priorities)s)
      AND published_at < now() - make_interval(secs => %(after_s)s)
    ORDER BY published_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
