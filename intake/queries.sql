-- name: insert_rows
-- One statement per batch: the rows come as one JSON array (jsonb_to_recordset), each
-- inserted unless its dedupe key exists, so a replayed or duplicated event is a no-op.
-- Sorted by key, so two intakes inserting overlapping batches lock keys in one order.
-- expires_at is computed on the database clock: now() of this transaction + expire_after_s.
INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, priority, expires_at)
SELECT r.dedupe_key, r.to_address, r.template, r.payload_json, r.priority,
       now() + r.expire_after_s * interval '1 second'
FROM jsonb_to_recordset(%(rows)s::jsonb) AS r (
    dedupe_key text, to_address text, template text, payload_json jsonb, priority text,
    expire_after_s float8
)
ORDER BY r.dedupe_key
ON CONFLICT (dedupe_key) DO NOTHING

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
