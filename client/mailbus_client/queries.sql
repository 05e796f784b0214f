-- name: enqueue_with_policy
-- Inserts unless the dedupe key exists; a missing expires_at defaults to now() (the caller's transaction start, the
-- same instant as created_at) + expire_after_s seconds; both NULL: the row never expires.
INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, priority, expires_at)
VALUES (%(dedupe_key)s, %(to_address)s, %(template)s, %(payload_json)s::jsonb, %(priority)s,
        COALESCE(%(expires_at)s::timestamptz,
                 now() + %(expire_after_s)s::float8 * interval '1 second'))
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING id

-- name: enqueue_bounded
-- As enqueue_with_policy, in one round trip with the queue bound: counts the open rows
-- (an index-only scan of email_sends_open_idx) and inserts only below the threshold.
-- Returns (open_rows, id): id NULL when refused (open_rows >= threshold) or a duplicate.
WITH open_rows AS (
    SELECT count(*) AS n FROM email_sends WHERE status IN ('pending', 'sending', 'unknown')
), inserted AS (
    INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, priority, expires_at)
    SELECT %(dedupe_key)s::text, %(to_address)s::text, %(template)s::text,
           %(payload_json)s::jsonb, %(priority)s::text,
           COALESCE(%(expires_at)s::timestamptz,
                    now() + %(expire_after_s)s::float8 * interval '1 second')
    FROM open_rows
    WHERE open_rows.n < %(threshold)s::bigint
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING id
)
SELECT open_rows.n, (SELECT id FROM inserted) FROM open_rows

-- name: find_by_dedupe_key
SELECT id FROM email_sends WHERE dedupe_key = %(dedupe_key)s
