-- name: load_sends
-- The rows a batch of pointers names, with whether each address is suppressed.
SELECT s.id, s.dedupe_key, s.to_address, s.template, s.payload_json, s.priority, s.status,
       s.attempts, s.expires_at, s.next_try_at, s.provider,
       EXISTS (SELECT 1 FROM email_suppressions x WHERE x.address = lower(s.to_address))
FROM email_sends s
WHERE s.id = ANY(%(ids)s::bigint[])

-- name: claim_for_send
-- pending -> sending for a batch of claims, each only for the attempt its pointer names and
-- only when due; each claimed row gets its claim's lease token. Returns the claimed ids.
UPDATE email_sends s
SET status = 'sending', attempts = s.attempts + 1, lease_token = c.token,
    lease_until = now() + make_interval(secs => %(lease_s)s), provider = c.provider
FROM jsonb_to_recordset(%(claims)s::jsonb) AS c (id bigint, attempt int, token uuid, provider text)
WHERE s.id = c.id AND s.status = 'pending' AND s.attempts = c.attempt
  AND (s.next_try_at IS NULL OR s.next_try_at <= now())
RETURNING s.id

-- name: release_claim
-- Undoes a claim whose call never started (no slot came in time): nothing was sent, so the
-- attempt is not counted, and the relay publishes the row again.
UPDATE email_sends
SET status = 'pending', attempts = attempts - 1, lease_token = NULL, lease_until = NULL,
    published_at = NULL
WHERE id = %(id)s AND status = 'sending' AND lease_token = %(token)s
RETURNING id

-- name: settle
-- Records a batch of decisions, each guarded: without a lease token the row must still be
-- `pending` at the pointer's attempt (expired, suppressed or invalid, decided before any
-- call); with one it must be `sending` under that token (the holder's call or look-up).
-- The attempt's history row (when a call was made) and the dead letter (when asked) go in
-- the same statement. Returns the ids whose decision was recorded.
WITH decided AS (
    SELECT * FROM jsonb_to_recordset(%(decisions)s::jsonb) AS d (
        id bigint, attempt int, token uuid, status text, next_try_at timestamptz,
        last_error text, message_id text, latency_ms int, status_code int, dead_letter bool,
        dl_reason text, dl_error text, topic text, kafka_partition int, kafka_offset bigint)
), settled AS (
    UPDATE email_sends s
    SET status = d.status,
        next_try_at = d.next_try_at,
        last_error = d.last_error,
        message_id = coalesce(d.message_id, s.message_id),
        accepted_at = CASE WHEN d.status = 'accepted' THEN now() ELSE s.accepted_at END,
        lease_until = NULL, lease_token = NULL, published_at = NULL
    FROM decided d
    WHERE s.id = d.id
      AND CASE WHEN d.token IS NULL
               THEN s.status = 'pending' AND s.attempts = d.attempt
               ELSE s.status = 'sending' AND s.lease_token = d.token END
    RETURNING s.id, s.dedupe_key, s.priority, s.template, s.attempts, d.status,
              d.status_code, d.last_error, d.latency_ms, d.dead_letter, d.dl_reason,
              d.dl_error, d.topic, d.kafka_partition, d.kafka_offset
), attempt AS (
    INSERT INTO email_attempts (send_id, attempt, outcome, status_code, reason, latency_ms)
    SELECT id, attempts, status, status_code, last_error, latency_ms
    FROM settled WHERE latency_ms IS NOT NULL
), dead_letter AS (
    INSERT INTO email_dead_letters (
        send_id, dedupe_key, priority, template, reason, status_code, error, attempts,
        original_topic, original_partition, original_offset)
    SELECT id, dedupe_key, priority, template, dl_reason, status_code, dl_error, attempts,
           topic, kafka_partition, kafka_offset
    FROM settled WHERE dead_letter
)
SELECT id FROM settled

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
RETURNING id
