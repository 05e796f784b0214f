-- name: claim_due
-- Marks a batch of due rows published and returns them; the transaction stays open
-- until Kafka acknowledged every pointer, so a crash before that undoes the claim.
-- The ids are locked in an ARRAY(…), a sub-select PostgreSQL runs once whatever the plan:
-- as `id IN (…)`, a plan made while the table was empty re-ran it for every row, took
-- every row past the limit and grew with the square of the backlog
-- (tests/integration/test_relay_claim_plans.py). Every claim below does the same.
-- After the pointer's first fields: seconds since the row became due (its insert, or its
-- next_try_at), on the database's clock, for mailbus_relay_publish_delay_seconds; then
-- what the pointer's header tells the consumer's gate (schemas/pointer_headers.py): the
-- template, and whether the row was never claimed.
UPDATE email_sends SET published_at = now()
WHERE id = ANY(ARRAY(
    SELECT id FROM email_sends
    WHERE status = 'pending' AND published_at IS NULL
      AND (next_try_at IS NULL OR next_try_at <= now())
    ORDER BY priority, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING id, dedupe_key, priority, attempts, created_at, traceparent, tracestate,
          extract(epoch FROM clock_timestamp() - greatest(created_at, next_try_at)),
          template, attempts = 0 AND first_tried_at IS NULL

-- name: claim_due_p0
-- claim_due for P0 rows alone: the P0 lane's claim (relay/relay.py), so a password reset
-- never waits for a batch of newsletters to be acknowledged. The same index, its p0 part.
UPDATE email_sends SET published_at = now()
WHERE id = ANY(ARRAY(
    SELECT id FROM email_sends
    WHERE priority = 'p0' AND status = 'pending' AND published_at IS NULL
      AND (next_try_at IS NULL OR next_try_at <= now())
    ORDER BY priority, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING id, dedupe_key, priority, attempts, created_at, traceparent, tracestate,
          extract(epoch FROM clock_timestamp() - greatest(created_at, next_try_at)),
          template, attempts = 0 AND first_tried_at IS NULL

-- name: claim_due_beside_p0
-- claim_due for pointer workers with a P0 lane beside them (relay/relay.py): a P0 row is
-- the lane's while it is fresh (its first second, relay.py's P0_LANE_FIRST_S), so it never
-- waits for a worker's batch of newsletters to be acknowledged; one due for a second
-- already (the lane stopped, or far behind) is taken first as claim_due takes it.
UPDATE email_sends SET published_at = now()
WHERE id = ANY(ARRAY(
    SELECT id FROM email_sends
    WHERE status = 'pending' AND published_at IS NULL
      AND (next_try_at IS NULL OR next_try_at <= now())
      AND (priority <> 'p0' OR coalesce(next_try_at, created_at) <= now() - interval '1 second')
    ORDER BY priority, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING id, dedupe_key, priority, attempts, created_at, traceparent, tracestate,
          extract(epoch FROM clock_timestamp() - greatest(created_at, next_try_at)),
          template, attempts = 0 AND first_tried_at IS NULL

-- name: unclaim
UPDATE email_sends SET published_at = NULL WHERE id = ANY(%(ids)s)

-- name: seconds_until_next_due
-- Seconds until this lane's claim may take the earliest retry ahead of the given
-- priorities, NULL if none: a retry's next_try_at, plus the priority's claimable_after_s
-- (the pointer workers' one second for a P0 retry beside a P0 lane, claim_due_beside_p0).
-- Reads the first entry of email_sends_next_retry_idx (0078) for each priority, whatever
-- the backlog due now, once email_sends has statistics. A table never analysed (a fresh
-- restore, before autovacuum's first ANALYZE) may be read through email_sends_open_idx and
-- a sort instead: tens of ms for 100,000 pending rows, for the pointer lanes' P2 look-up
-- (the P0 lane's reads the P0 rows alone). After a campaign's resume, its held rows' dead
-- entries (at +100 years) are read until VACUUM removes them. A retry that became
-- claimable since the lane's last pass began (since_claim_s seconds ago) counts too, with
-- seconds below zero: that pass's claim came before it, and no look-up saw it. The entries
-- of retries other lanes published in that span are read too, until marked dead: about
-- 90 pages for 20,000 retries in a 2 s span.
SELECT extract(epoch FROM min(ahead.claimable_at) - now())
FROM unnest(%(priorities)s::text[], %(claimable_after_s)s::float8[])
         AS p (priority, claimable_after_s),
     LATERAL (SELECT s.next_try_at + make_interval(secs => p.claimable_after_s) AS claimable_at
              FROM email_sends s
              WHERE s.priority = p.priority AND s.status = 'pending'
                AND s.published_at IS NULL
                AND s.next_try_at > now()
                    - make_interval(secs => %(since_claim_s)s + p.claimable_after_s)
              ORDER BY s.next_try_at
              LIMIT 1) AS ahead

-- name: claim_dead_letters
-- Same claim as claim_due, for email_dead_letters; the columns are the fields of
-- schemas.dead_letter.DeadLetter.
UPDATE email_dead_letters SET published_at = now()
WHERE id = ANY(ARRAY(
    SELECT id FROM email_dead_letters
    WHERE published_at IS NULL
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING id, send_id, dedupe_key, priority, template, reason, status_code, error, attempts,
          original_topic, original_partition, original_offset, original_key, original_value,
          created_at

-- name: unclaim_dead_letters
UPDATE email_dead_letters SET published_at = NULL WHERE id = ANY(%(ids)s)

-- name: lock_send_events
-- Held until the events pass commits: one relay at a time publishes outcome events, so
-- two relays never interleave a send's events out of order. Returns false if taken.
SELECT pg_try_advisory_xact_lock(7881696737104327426)  -- "mailbus\x02"

-- name: claim_send_events
-- Unpublished outcome events in id order (a send's changes are in id order: its row lock
-- orders them), returned in that order (RETURNING alone keeps none); the columns are the
-- fields of schemas.send_event.SendEvent.
WITH claimed AS (
    UPDATE email_send_events SET published_at = now()
    WHERE id = ANY(ARRAY(
        SELECT id FROM email_send_events
        WHERE published_at IS NULL
        ORDER BY id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING id AS event_id, send_id, dedupe_key, template, event, status, occurred_at,
              delivery_status, message_id, error
)
SELECT * FROM claimed ORDER BY event_id

-- name: unclaim_send_events
UPDATE email_send_events SET published_at = NULL WHERE id = ANY(%(ids)s)

-- name: prune_send_events
-- Published events past their retention (they are on Kafka; the table is not an archive).
-- Every relay with the events lane prunes the same rows: each locks them in id order and
-- skips those another holds (it deletes them), as claim_send_events does; in the order
-- their plans met them, two relays could each hold a row the other waited for.
DELETE FROM email_send_events
WHERE id = ANY(ARRAY(
    SELECT id FROM email_send_events
    WHERE published_at < now() - make_interval(secs => %(retention_s)s)
    ORDER BY id
    FOR UPDATE SKIP LOCKED
))
