-- name: insert_rows
-- One statement per batch: the rows come as one JSON array (jsonb_to_recordset), each
-- inserted unless its dedupe key exists, so a replayed or duplicated event is a no-op.
-- Sorted by key in the column's collation, "C" (migration 0017), as the client's
-- enqueue_many sorts them, so intakes and producers inserting overlapping batches lock
-- keys in one order (in the database's collation, which need not be C, an intake and a
-- producer could each wait for a key the other holds).
-- Expiry counts from the event's occurred_at (else from now()), on the database clock. An
-- event older than MAILBUS_INTAKE_MAX_AGE (%(max_age_s)s) is recorded, not mailed: its row
-- is inserted already expired, which also keeps its key from ever being mailed later.
-- The event's W3C trace context (its traceparent header, validated) goes with its row.
INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, priority, expires_at,
                         status, last_error, traceparent, tracestate)
SELECT r.dedupe_key, r.to_address, r.template, r.payload_json, r.priority,
       CASE WHEN r.too_old THEN r.since + %(max_age_s)s * interval '1 second'
            ELSE r.since + r.expire_after_s * interval '1 second' END,
       CASE WHEN r.too_old THEN 'expired' ELSE 'pending' END,
       CASE WHEN r.too_old THEN 'event older than MAILBUS_INTAKE_MAX_AGE: not mailed' END,
       r.traceparent, r.tracestate
FROM (
    SELECT j.*, coalesce(j.occurred_at, now()) AS since,
           coalesce(j.occurred_at < now() - %(max_age_s)s * interval '1 second', false)
               AS too_old
    FROM jsonb_to_recordset(%(rows)s::jsonb) AS j (
        dedupe_key text, to_address text, template text, payload_json jsonb, priority text,
        expire_after_s float8, occurred_at timestamptz, traceparent text, tracestate text
    )
) AS r
ORDER BY r.dedupe_key COLLATE "C"
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING status, id

-- name: send_id_by_key
-- `dlq replay` of an intake dead letter whose key was enqueued meanwhile (intake/replay.py).
SELECT id FROM email_sends WHERE dedupe_key = %(dedupe_key)s

-- name: insert_dead_letters
-- The batch's rejected events, in the same transaction as its rows (keys and values come
-- base64-encoded). Already published: the intake puts them on {prefix}.intake.dlq itself
-- (before this commits), the relay must not put them on {prefix}.send.dlq. An event read
-- twice (a replay after a crash) keeps its first letter (0012_intake_dead_letters.sql).
INSERT INTO email_dead_letters (reason, error, original_topic, original_partition,
                                original_offset, original_key, original_value, published_at)
SELECT l.reason, l.error, l.topic, l.partition, l."offset",
       decode(l.key, 'base64'), decode(l.value, 'base64'), now()
FROM jsonb_to_recordset(%(letters)s::jsonb) AS l (
    reason text, error text, topic text, partition int, "offset" bigint, key text, value text
)
ORDER BY l.topic, l.partition, l."offset"
ON CONFLICT (original_topic, original_partition, original_offset)
    WHERE reason IN ('intake_undecodable', 'intake_invalid')
    DO NOTHING
