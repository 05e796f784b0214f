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
