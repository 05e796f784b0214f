-- name: record_events
-- A batch of delivery events in one statement (the receiver coalesces concurrent requests;
-- the caller has removed repeats of a (provider, event id) within the batch). Each event
-- row is inserted once per (provider, event id); only the events that were new change
-- anything else:
-- * each send with their message_id takes the latest of them (by occurred_at, a tie at
--   the same instant to the higher rank, see feedback/events.py), unless the send already
--   shows a later event: the guard on last_event_at, evaluated again on the current row
--   version when a concurrent statement changed it first;
-- * a hard bounce or a complaint (or an event naming its own suppression, e.g. a Mailgun drop
--   for an unsubscribed address) suppresses the sends' addresses, lower-cased; an entry
--   there already keeps its reason unless a hard bounce widens a bulk-only one (a
--   complaint's or an unsubscribe's, migration 0019) to all mail.
-- An event matches only sends that went through its provider (review #11): a send's
-- provider is the named provider its route went through, from the JSON object `through`
-- (feedback/store.py): under "" the one MAILBUS_PROVIDER names for the default route
-- (email_sends.provider NULL; none when it names none: then any), under "fallback" the one
-- MAILBUS_FALLBACK_PROVIDER names; else email_sends.provider itself. A named
-- provider's event (%(named)s: ses, sendgrid, ...) matches that provider's sends; a
-- Mailbus-Signature event (any other path) matches sends of no named provider.
-- The sends are found by `message_id = ANY(ARRAY(…))`, through its index: joined to the
-- JSON batch alone (which PostgreSQL always guesses at 100 rows), a table of up to tens of
-- thousands of rows was scanned whole (tests/integration/test_batch_statement_plans.py).
-- The sends it updates are locked in id order first, as consumer/queries.sql's settle locks
-- them: in the order its plan met them, two receivers (or one and apply_late_events)
-- updating the same sends could each hold one the other waited for ("deadlock detected");
-- statements that lock in one order never do (tests/integration/test_row_lock_order.py).
-- Returns one row per event, in batch order: (n, new, matched, updated, suppressed,
-- traceparent, tracestate), the last two of the first send it matched.
WITH batch AS (
    SELECT * FROM jsonb_to_recordset(%(events)s::jsonb) AS e (
        n int, provider text, event_id text, type text, bounce text, message_id text,
        occurred_at timestamptz, rank int, suppress bool, reason text, source text,
        detail text, suppression text, provider_key text)
), target AS (
    SELECT b.n, s.id, s.to_address
    FROM batch b JOIN email_sends s ON true
    WHERE s.message_id = ANY(ARRAY(SELECT message_id FROM batch))  -- by its index
      AND s.message_id = b.message_id
      AND (coalesce(%(through)s::jsonb ->> coalesce(s.provider, ''), s.provider) IS NULL
           OR coalesce(%(through)s::jsonb ->> coalesce(s.provider, ''), s.provider)
              = CASE WHEN b.provider = ANY(%(named)s::text[]) THEN b.provider END
           OR (b.provider <> ALL(%(named)s::text[])
               AND coalesce(%(through)s::jsonb ->> coalesce(s.provider, ''), s.provider) <> ALL(%(named)s::text[])))
), inserted AS (
    INSERT INTO delivery_events (provider, event_id, type, bounce, message_id, occurred_at, matched,
                                 reason, suppression, provider_key)
    SELECT b.provider, b.event_id, b.type, b.bounce, b.message_id, b.occurred_at,
           EXISTS (SELECT 1 FROM target t WHERE t.n = b.n), b.detail, b.suppression,
           b.provider_key
    FROM batch b
    ORDER BY b.provider, b.event_id  -- the key's order: two receivers given one provider's
    ON CONFLICT (provider, event_id) DO NOTHING  -- retries in other orders never deadlock
    RETURNING provider, event_id
), fresh AS (
    SELECT b.* FROM batch b JOIN inserted i USING (provider, event_id)
), latest AS (
    SELECT DISTINCT ON (t.id) t.id, f.n, f.type, f.occurred_at, f.rank
    FROM fresh f JOIN target t ON t.n = f.n
    ORDER BY t.id, f.occurred_at DESC, f.rank DESC
), locked AS (  -- in id order first
    SELECT s.id FROM email_sends s WHERE s.id = ANY(ARRAY(SELECT id FROM latest))
    ORDER BY s.id FOR UPDATE
), updated AS (
    UPDATE email_sends s
    SET delivery_status = l.type, last_event_at = l.occurred_at
    FROM latest l
    WHERE s.id = ANY(ARRAY(SELECT id FROM locked)) AND s.id = l.id
      AND (s.last_event_at IS NULL
           OR s.last_event_at < l.occurred_at
           OR (s.last_event_at = l.occurred_at
               AND coalesce(array_position(%(ranks)s::text[], s.delivery_status), 0) < l.rank))
    RETURNING l.n
), to_suppress AS (
    SELECT DISTINCT ON (lower(t.to_address)) lower(t.to_address) AS address, f.n, f.reason,
           f.source
    FROM fresh f JOIN target t ON t.n = f.n
    WHERE f.suppress
    ORDER BY lower(t.to_address), f.reason IN ('complaint', 'unsubscribed'), f.n  -- all mail first
), suppressed AS (
    INSERT INTO email_suppressions (address, reason, source)
    SELECT address, reason, source FROM to_suppress
    ON CONFLICT (address) DO UPDATE SET reason = EXCLUDED.reason, source = EXCLUDED.source
    WHERE email_suppressions.scope = 'bulk' AND EXCLUDED.scope = 'all'
    RETURNING address
)
SELECT b.n,
       EXISTS (SELECT 1 FROM fresh f WHERE f.n = b.n),
       EXISTS (SELECT 1 FROM target t WHERE t.n = b.n),
       (SELECT count(*) FROM updated u WHERE u.n = b.n),
       (SELECT count(*) FROM suppressed x JOIN to_suppress c USING (address) WHERE c.n = b.n),
       trace.traceparent, trace.tracestate
FROM batch b
LEFT JOIN LATERAL (  -- the trace context of the (first) send it matched, for its span
    SELECT s.traceparent, s.tracestate
    FROM target t JOIN email_sends s ON s.id = t.id
    WHERE t.n = b.n
    ORDER BY s.id
    LIMIT 1
) trace ON true
ORDER BY b.n

-- name: ready
SELECT 1

-- name: apply_late_events
-- Events stored unmatched (no send had their message_id yet) whose send has it now,
-- received within the last day, at most 1,000 a pass: marked matched and applied as
-- record_events applies new events (the same provider rule, guard, suppressions and
-- widening). SKIP LOCKED
-- lets several receivers sweep at once. Returns (applied, updated, suppressed).
WITH picked AS (
    SELECT e.provider, e.event_id
    FROM delivery_events e
    WHERE NOT e.matched AND e.received_at > now() - interval '1 day'
      AND EXISTS (SELECT 1 FROM email_sends s WHERE true
          AND s.message_id = e.message_id
          AND (coalesce(%(through)s::jsonb ->> coalesce(s.provider, ''), s.provider) IS NULL
               OR coalesce(%(through)s::jsonb ->> coalesce(s.provider, ''), s.provider)
                  = CASE WHEN e.provider = ANY(%(named)s::text[]) THEN e.provider END
               OR (e.provider <> ALL(%(named)s::text[])
                   AND coalesce(%(through)s::jsonb ->> coalesce(s.provider, ''), s.provider) <> ALL(%(named)s::text[]))))
    ORDER BY e.received_at
    LIMIT 1000
    FOR UPDATE OF e SKIP LOCKED
), late AS (
    UPDATE delivery_events e SET matched = true
    FROM picked p
    WHERE e.provider = p.provider AND e.event_id = p.event_id
    RETURNING e.provider, e.event_id, e.type, e.bounce, e.message_id, e.occurred_at,
              array_position(%(ranks)s::text[], e.type) AS rank,
              coalesce(e.suppression,
                       CASE WHEN e.type = 'complained' THEN 'complaint'
                            WHEN e.type = 'bounced' AND e.bounce = 'hard' THEN 'hard_bounce'
                       END) AS suppression
), target AS (
    SELECT l.*, s.id, s.to_address
    FROM late l JOIN email_sends s ON true
    WHERE true
      AND s.message_id = l.message_id
      AND (coalesce(%(through)s::jsonb ->> coalesce(s.provider, ''), s.provider) IS NULL
           OR coalesce(%(through)s::jsonb ->> coalesce(s.provider, ''), s.provider)
              = CASE WHEN l.provider = ANY(%(named)s::text[]) THEN l.provider END
           OR (l.provider <> ALL(%(named)s::text[])
               AND coalesce(%(through)s::jsonb ->> coalesce(s.provider, ''), s.provider) <> ALL(%(named)s::text[])))
), latest AS (
    SELECT DISTINCT ON (t.id) t.id, t.type, t.occurred_at, t.rank
    FROM target t
    ORDER BY t.id, t.occurred_at DESC, t.rank DESC
), locked AS (  -- in id order first, as record_events locks them
    SELECT s.id FROM email_sends s WHERE s.id = ANY(ARRAY(SELECT id FROM latest))
    ORDER BY s.id FOR UPDATE
), updated AS (
    UPDATE email_sends s
    SET delivery_status = l.type, last_event_at = l.occurred_at
    FROM latest l
    WHERE s.id = ANY(ARRAY(SELECT id FROM locked)) AND s.id = l.id
      AND (s.last_event_at IS NULL
           OR s.last_event_at < l.occurred_at
           OR (s.last_event_at = l.occurred_at
               AND coalesce(array_position(%(ranks)s::text[], s.delivery_status), 0) < l.rank))
    RETURNING s.id
), suppressed AS (
    INSERT INTO email_suppressions (address, reason, source)
    SELECT DISTINCT ON (lower(t.to_address)) lower(t.to_address), t.suppression,
           'webhook:' || t.provider
    FROM target t
    WHERE t.suppression IS NOT NULL
    ORDER BY lower(t.to_address), t.suppression IN ('complaint', 'unsubscribed'),
             t.occurred_at  -- all mail first
    ON CONFLICT (address) DO UPDATE SET reason = EXCLUDED.reason, source = EXCLUDED.source
    WHERE email_suppressions.scope = 'bulk' AND EXCLUDED.scope = 'all'
    RETURNING address
)
SELECT (SELECT count(*) FROM late), (SELECT count(*) FROM updated),
       (SELECT count(*) FROM suppressed)

-- name: remember_token
-- A provider's signature token, once: the row when it is new, or when it was seen before
-- with the same digest (the same event posted again: a retry); nothing when it was seen
-- with another (a replay). Old tokens are pruned by prune_tokens.
INSERT INTO webhook_tokens AS w (provider, token, digest)
VALUES (%(provider)s, %(token)s, %(digest)s)
ON CONFLICT (provider, token) DO UPDATE SET seen_at = w.seen_at
WHERE w.digest = EXCLUDED.digest
RETURNING 1

-- name: prune_tokens
-- Tokens older than the tolerance window, at most 10,000 a pass (webhook_tokens_seen_at_idx).
DELETE FROM webhook_tokens
WHERE ctid = ANY(ARRAY(SELECT ctid FROM webhook_tokens
                       WHERE seen_at < now() - make_interval(secs => %(keep_s)s)
                       LIMIT 10000))

-- name: settle_from_events
-- Sends of a provider with neither a key nor a look-up (SendGrid, Mailgun) whose own events
-- name them by the key the send carried (custom_args.dedupe_key, v:dedupe_key: the provider
-- key, mailbus/kernel/provider_key.py, which must equal the one the row was sent under, so
-- another life or deployment of the dedupe key never settles it) and prove the provider
-- took the mail (delivered, deferred, bounced, complained; the caller filters): accepted,
-- with the event's message id, as `mailbus send resolve --accepted` would settle them,
-- under the provider rule of record_events. That is a send left `unknown`, and one
-- `pending` after a call (a resend scheduled at least once, a retry): it is not sent again.
-- A send still `sending` is not touched (its call is in flight): its event is kept
-- (delivery_events.provider_key) and the sweep comes back with it (kept_settlements).
-- Found through the dedupe key's unique index. Through mailbus_settle_from_events
-- (migration 0069), which makes only that move: the webhooks role may change no send's
-- status itself. Runs just before record_events, which then applies the events to them
-- (or apply_late_events, after the sweep). Returns the keys settled.
SELECT mailbus_settle_from_events(%(settle)s::jsonb, %(through)s::jsonb)

-- name: kept_settlements
-- Events kept to settle their send once it can be (settle_from_events): stored unmatched
-- within the last day with the key they carried, newest first (an event whose send never
-- becomes settleable ages out instead of starving newer ones), at most 1,000 a pass,
-- through delivery_events_unmatched_idx.
SELECT provider, provider_key, message_id
FROM delivery_events
WHERE NOT matched AND received_at > now() - interval '1 day' AND provider_key IS NOT NULL
ORDER BY received_at DESC
LIMIT 1000
