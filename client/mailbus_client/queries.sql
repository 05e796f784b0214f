-- Named queries of the client (mailbus_client/steps.py), each table and function named in
-- mailbus's schema (`{schema}.`, mailbus_client/db_schema.py): they run in the application's
-- connection, whatever its search_path. Times the relay compares are the
-- database's: a delay (delay_s) and a policy's expiry (expire_after_s) count from now(),
-- the caller's transaction start, the same instant created_at gets.

-- name: enqueue_with_policy
-- Inserts unless the dedupe key exists. next_try_at (not before): the given instant, else
-- now() + delay_s, else NULL (at once). A missing expires_at defaults to the send time
-- (next_try_at, else now()) + expire_after_s seconds; both NULL: the row never expires.
INSERT INTO {schema}.email_sends (dedupe_key, to_address, template, payload_json, priority, next_try_at,
                         expires_at, traceparent, tracestate)
SELECT %(dedupe_key)s::text, %(to_address)s::text, %(template)s::text,
       %(payload_json)s::jsonb, %(priority)s::text, due.at,
       COALESCE(%(expires_at)s::timestamptz,
                COALESCE(due.at, now()) + %(expire_after_s)s::float8 * interval '1 second'),
       %(traceparent)s::text, %(tracestate)s::text
FROM (SELECT COALESCE(%(next_try_at)s::timestamptz,
                      now() + %(delay_s)s::float8 * interval '1 second') AS at) AS due
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING id

-- name: enqueue_bounded
-- As enqueue_with_policy, in one round trip with the queue bound: counts the open rows
-- (an index-only scan of email_sends_open_idx) and inserts only below the threshold.
-- Returns (open_rows, id): id NULL when refused (open_rows >= threshold) or a duplicate.
WITH open_rows AS (
    SELECT count(*) AS n FROM {schema}.email_sends WHERE status IN ('pending', 'sending', 'unknown')
), inserted AS (
    INSERT INTO {schema}.email_sends (dedupe_key, to_address, template, payload_json, priority,
                             next_try_at, expires_at, traceparent, tracestate)
    SELECT %(dedupe_key)s::text, %(to_address)s::text, %(template)s::text,
           %(payload_json)s::jsonb, %(priority)s::text, due.at,
           COALESCE(%(expires_at)s::timestamptz,
                    COALESCE(due.at, now()) + %(expire_after_s)s::float8 * interval '1 second'),
           %(traceparent)s::text, %(tracestate)s::text
    FROM open_rows,
         (SELECT COALESCE(%(next_try_at)s::timestamptz,
                          now() + %(delay_s)s::float8 * interval '1 second') AS at) AS due
    WHERE open_rows.n < %(threshold)s::bigint
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING id
)
SELECT open_rows.n, (SELECT id FROM inserted) FROM open_rows

-- name: enqueue_many
-- enqueue_with_policy for many rows in one statement: one array per column, one element
-- per row (no dedupe key twice), inserted in key order. With a threshold, the batch is
-- written only when the open rows plus its keys not yet in the table stay within it (open
-- rows counted only then); a batch of keys all in the table is a no-op, never refused.
-- Returns per row, in order: (id, created, open_rows, admitted); id NULL when a
-- concurrent transaction committed the key after this statement's snapshot was taken.
-- Existing keys are looked up by correlated sub-selects, one index probe per row: as a
-- join, the planner hashed the whole table (tests/integration/test_client_server.py).
WITH input AS (
    SELECT * FROM unnest(%(dedupe_key)s::text[], %(to_address)s::text[], %(template)s::text[],
                         %(payload_json)s::jsonb[], %(priority)s::text[],
                         %(next_try_at)s::timestamptz[], %(delay_s)s::float8[],
                         %(expires_at)s::timestamptz[], %(expire_after_s)s::float8[],
                         %(traceparent)s::text[], %(tracestate)s::text[])
        WITH ORDINALITY AS i (dedupe_key, to_address, template, payload_json, priority,
                              next_try_at, delay_s, expires_at, expire_after_s, traceparent,
                              tracestate, n)
), open_rows AS (
    SELECT count(*) AS n FROM {schema}.email_sends
    WHERE %(threshold)s::bigint IS NOT NULL AND status IN ('pending', 'sending', 'unknown')
), fresh AS (
    SELECT count(*) AS n FROM input
    WHERE %(threshold)s::bigint IS NOT NULL
      AND (SELECT true FROM {schema}.email_sends AS s WHERE s.dedupe_key = input.dedupe_key) IS NULL
), admitted AS (
    SELECT %(threshold)s::bigint IS NULL OR (SELECT n FROM fresh) = 0
           OR (SELECT n FROM open_rows) + (SELECT n FROM fresh) <= %(threshold)s::bigint AS ok
), inserted AS (
    INSERT INTO {schema}.email_sends (dedupe_key, to_address, template, payload_json, priority,
                             next_try_at, expires_at, traceparent, tracestate)
    SELECT dedupe_key, to_address, template, payload_json, priority, due.at,
           COALESCE(expires_at, COALESCE(due.at, now()) + expire_after_s * interval '1 second'),
           traceparent, tracestate
    FROM input,
         LATERAL (SELECT COALESCE(next_try_at, now() + delay_s * interval '1 second') AS at) AS due
    WHERE (SELECT ok FROM admitted)
    ORDER BY dedupe_key COLLATE "C"  -- one order for every batch: two overlapping ones never deadlock
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING id, dedupe_key
)
SELECT COALESCE(inserted.id,
                (SELECT s.id FROM {schema}.email_sends AS s WHERE s.dedupe_key = input.dedupe_key)),
       inserted.id IS NOT NULL, (SELECT n FROM open_rows), (SELECT ok FROM admitted)
FROM input
LEFT JOIN inserted ON inserted.dedupe_key = input.dedupe_key
ORDER BY input.n

-- name: find_by_dedupe_key
SELECT id FROM {schema}.email_sends WHERE dedupe_key = %(dedupe_key)s

-- name: send_status
-- What the enqueuer may read of its send (no address, payload or error text).
SELECT id, status, delivery_status, attempts, message_id, next_try_at, expires_at,
       created_at, updated_at
FROM {schema}.email_sends WHERE dedupe_key = %(key)s

-- name: cancel_send
-- `mailbus send cancel` and Client.cancel: pending -> expired for a send no call was made
-- for, with its audit row; the guard is the function's (schemas/sql/0056_client_api.sql).
-- Returns the send's id, or NULL when no send with this key may be cancelled.
SELECT {schema}.mailbus_cancel_send(%(key)s::text, COALESCE(%(by)s::text, session_user::text))
