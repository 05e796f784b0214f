-- name: load_sends
-- The rows a batch of pointers names, with the widest scope of the suppressions of each
-- address (compared case-insensitively; 'all' over 'bulk', NULL: none, see
-- consumer/core/suppression.py), its campaign and the database's clock, which every time
-- decision is made on; the key it was first sent under and its life (one more than the
-- lives its dedupe key had before, email_key_lives: migration 0048).
SELECT s.id, s.dedupe_key, s.to_address, s.template, s.payload_json, s.priority, s.status,
       s.attempts, s.expires_at, s.next_try_at, s.in_doubt_since, s.provider, s.created_at,
       s.first_tried_at, s.provider_key,
       coalesce((SELECT k.lives + 1 FROM email_key_lives k WHERE k.dedupe_key = s.dedupe_key), 1),
       (SELECT min(x.scope) FROM email_suppressions x
        WHERE lower(x.address) = lower(s.to_address)),  -- 'all' < 'bulk'
       s.campaign_id, s.provider_kind, clock_timestamp()
FROM email_sends s
WHERE s.id = ANY(%(ids)s::bigint[])

-- name: claim_for_send
-- pending -> sending for a batch of claims. Every guard that decides a send is here: the
-- attempt the pointer names, due, not expired (nor expiring within `headroom_s`: a call
-- started then could reach the provider after it, consumer/core/decide.py), a retry (a row
-- with a counted call, or claimed before: decide.tried) not past MAILBUS_MAX_AGE, the
-- provider fixed by a row's first claim (a mail one provider may have taken is never
-- offered to another, even once its attempts were handed back or reset), as is its kind
-- (`provider_kind`, migration 0071: a MAILBUS_PROVIDER switched since, postmark to resend,
-- never takes a retry; NULL, a row claimed before: any), and no row of a paused or cancelled campaign, whatever its attempts (a row
-- that was in flight when its campaign paused comes back pending, with its own retry time;
-- campaigns/queries.sql, hold_queued, covers the rows pending at the pause). A claim retried after
-- its reply was lost finds the row already under its own token and gets it again,
-- uncounted. Rows are locked first (`locked`), so the lease and the guards' clock are read
-- once the row is ours: a claim that waited on the relay's lock is not born lapsed.
-- A row in doubt (a call of it had no known outcome) is sent again only within
-- `resend_window_s` of its first call (an idempotency key's window, less the time to reach
-- the provider; NULL: any time). The claim records the guarantee the row is sent under
-- (never upgrading one an operator made `at_least_once`, consumer/send_admin.sql), the
-- start of its first call and the key its first call carries (never changed after); a
-- claim carrying another key (loaded before a claim under another prefix, released
-- since) is refused: the next load carries the recorded one.
-- The rows are found by `id = ANY(ARRAY(…))`, through the primary key: joined to the JSON
-- batch instead (which PostgreSQL always guesses at 100 rows), a table of up to tens of
-- thousands of rows was scanned whole, twice per claim
-- (tests/integration/test_batch_statement_plans.py).
-- Returns the claimed ids, the seconds each has left before it expires, and, for a row in
-- doubt, before its resend window ends (NULL: never): the call must still start in both
-- once the row has waited for an in-flight slot (consumer/service.py).
WITH claims AS (
    SELECT * FROM jsonb_to_recordset(%(claims)s::jsonb)
        AS c (id bigint, attempt int, token uuid, provider text, provider_kind text,
              guarantee text, resend_window_s float8, provider_key text)
), locked AS (
    SELECT s.id FROM email_sends s WHERE s.id = ANY(ARRAY(SELECT id FROM claims))
    ORDER BY s.id FOR UPDATE
)
UPDATE email_sends s
SET status = 'sending',
    attempts = CASE WHEN s.status = 'pending' THEN s.attempts + 1 ELSE s.attempts END,
    lease_token = c.token,
    lease_until = clock_timestamp() + make_interval(secs => %(lease_s)s),
    provider = c.provider,
    provider_kind = c.provider_kind,
    guarantee = CASE WHEN s.guarantee = 'at_least_once' THEN s.guarantee  -- an operator's choice
                     ELSE coalesce(c.guarantee, s.guarantee) END,
    first_tried_at = coalesce(s.first_tried_at, clock_timestamp()),
    provider_key = coalesce(s.provider_key, c.provider_key)
FROM claims c
WHERE s.id = ANY(ARRAY(SELECT id FROM locked)) AND s.id = c.id
  AND ((s.status = 'pending' AND s.attempts = c.attempt
        AND (s.next_try_at IS NULL OR s.next_try_at <= clock_timestamp())
        AND (s.expires_at IS NULL
             OR s.expires_at > clock_timestamp() + make_interval(secs => %(headroom_s)s))
        AND ((s.attempts = 0 AND s.first_tried_at IS NULL) OR %(max_age_s)s::float8 IS NULL
             OR s.created_at + make_interval(secs => %(max_age_s)s::float8) > clock_timestamp())
        AND ((s.attempts = 0 AND s.first_tried_at IS NULL)
             OR (s.provider IS NOT DISTINCT FROM c.provider
                 AND (s.provider_kind IS NULL OR s.provider_kind = c.provider_kind)))
        AND (s.in_doubt_since IS NULL OR c.resend_window_s IS NULL
             OR s.first_tried_at + make_interval(secs => c.resend_window_s) > clock_timestamp()))
       OR (s.status = 'sending' AND s.lease_token = c.token))
  AND (s.provider_key IS NULL OR c.provider_key IS NULL OR s.provider_key = c.provider_key)
  AND NOT EXISTS (SELECT 1 FROM campaigns k
                  WHERE k.id = s.campaign_id AND k.state IN ('paused', 'cancelled'))
RETURNING s.id, extract(epoch FROM s.expires_at - clock_timestamp())::float8,
          CASE WHEN s.in_doubt_since IS NOT NULL THEN extract(epoch FROM
              s.first_tried_at + make_interval(secs => c.resend_window_s) - clock_timestamp())::float8
          END

-- name: claim_first_attempt
-- load_sends and claim_for_send in one statement, for a pointer whose header says its row
-- was never claimed (schemas/pointer_headers.py): the consumer's gate has decided on
-- the pointer (route, breaker, rate), so the row is touched once. Each row named (and of
-- the pointer's dedupe key) is locked and returned as load_sends returns it, before the
-- claim, with the guarantee it had and whether it was claimed, and the seconds it has left
-- before it expires. It is claimed only under claim_for_send's guards for a first attempt,
-- narrowed to what needs no look at the row first: never claimed (no first call, no
-- provider, no key, never in doubt), of the template and priority the gate decided on (a
-- header of another producer decides nothing), and its key's first life (the key sent,
-- `provider_key`, is the dedupe key under MAILBUS_PROVIDER_KEY_PREFIX). A suppression is
-- the consumer's to weigh once the row is read: a mail it stops has its claim undone
-- (settle, `unclaim`). A row not claimed goes the usual way, from the row returned. A claim
-- retried after its reply was lost finds the row under its own token and gets it again,
-- returned as it was before that claim.
WITH claims AS (
    SELECT * FROM jsonb_to_recordset(%(claims)s::jsonb)
        AS c (id bigint, dedupe_key text, template text, priority text, token uuid,
              provider text, provider_kind text, guarantee text, provider_key text)
), locked AS (
    SELECT s.id, s.dedupe_key, s.to_address, s.template, s.payload_json, s.priority,
           s.status, s.attempts, s.expires_at, s.next_try_at, s.in_doubt_since, s.provider,
           s.created_at, s.first_tried_at, s.provider_key, s.campaign_id, s.provider_kind,
           s.guarantee, s.lease_token
    FROM email_sends s WHERE s.id = ANY(ARRAY(SELECT id FROM claims))
    ORDER BY s.id FOR UPDATE
), found AS (
    SELECT l.*, c.guarantee AS claim_guarantee,
           l.template = c.template AND l.priority = c.priority AS as_decided,
           l.status = 'sending' AND l.lease_token = c.token AS ours,
           coalesce((SELECT k.lives + 1 FROM email_key_lives k
                     WHERE k.dedupe_key = l.dedupe_key), 1) AS life,
           (SELECT min(x.scope) FROM email_suppressions x
            WHERE lower(x.address) = lower(l.to_address)) AS suppression  -- 'all' < 'bulk'
    FROM locked l JOIN claims c ON c.id = l.id AND c.dedupe_key = l.dedupe_key
), claimed AS (
    UPDATE email_sends s
    SET status = 'sending',
        attempts = 1,
        lease_token = c.token,
        lease_until = clock_timestamp() + make_interval(secs => %(lease_s)s),
        provider = c.provider,
        provider_kind = c.provider_kind,
        guarantee = CASE WHEN s.guarantee = 'at_least_once' THEN s.guarantee
                         ELSE coalesce(c.guarantee, s.guarantee) END,
        first_tried_at = coalesce(s.first_tried_at, clock_timestamp()),
        provider_key = c.provider_key
    FROM claims c, found f
    WHERE s.id = ANY(ARRAY(SELECT id FROM found)) AND s.id = c.id AND f.id = c.id
      AND (f.ours
           OR (f.status = 'pending' AND f.attempts = 0 AND f.first_tried_at IS NULL
               AND f.provider IS NULL AND f.provider_key IS NULL AND f.in_doubt_since IS NULL
               AND f.as_decided AND f.life = 1
               AND (f.next_try_at IS NULL OR f.next_try_at <= clock_timestamp())
               AND (f.expires_at IS NULL
                    OR f.expires_at > clock_timestamp() + make_interval(secs => %(headroom_s)s))))
      AND NOT EXISTS (SELECT 1 FROM campaigns k
                      WHERE k.id = f.campaign_id AND k.state IN ('paused', 'cancelled'))
    RETURNING s.id, extract(epoch FROM s.expires_at - clock_timestamp())::float8 AS left_s
)
SELECT f.id, f.dedupe_key, f.to_address, f.template, f.payload_json, f.priority,
       CASE WHEN f.ours THEN 'pending' ELSE f.status END,
       CASE WHEN f.ours THEN 0 ELSE f.attempts END,
       f.expires_at, f.next_try_at, f.in_doubt_since,
       CASE WHEN f.ours THEN NULL ELSE f.provider END, f.created_at,
       CASE WHEN f.ours THEN NULL ELSE f.first_tried_at END,
       CASE WHEN f.ours THEN NULL ELSE f.provider_key END,
       f.life, f.suppression, f.campaign_id,
       CASE WHEN f.ours THEN NULL ELSE f.provider_kind END,
       clock_timestamp(),
       -- before a retried claim: an operator's at_least_once where the claim wrote another
       CASE WHEN f.ours AND f.guarantee IS NOT DISTINCT FROM f.claim_guarantee THEN NULL
            ELSE f.guarantee END,
       k.id IS NOT NULL, k.left_s
FROM found f LEFT JOIN claimed k ON k.id = f.id

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
-- the same statement. An `uncounted` call (the provider's server failed before the mail
-- reached it) hands its attempt back and leaves no history row. A `failed` whose call
-- said the address itself is bad (`suppress_source`, e.g. SMTP 550 5.1.1) suppresses the
-- address as a webhook hard bounce does, in the same statement (widening a bulk-only
-- entry to all mail). An `unclaim` decision (taken on a row claim_first_attempt claimed,
-- before any call: its address or template cannot be sent, its domain is throttling us)
-- also undoes that claim, leaving the row as if it had never been claimed: its attempt,
-- first call, provider, kind and key, and the `guarantee` it had. The rows are found by
-- `id = ANY(ARRAY(…))` and locked in id order first, as in claim_for_send: a campaign's
-- pause waits for them in that order too, and two statements that lock in one order never
-- deadlock
-- (schemas/sql/0073_campaign_rows_locked_in_order.sql).
-- Returns the ids whose decision was recorded.
WITH decided AS (
    SELECT * FROM jsonb_to_recordset(%(decisions)s::jsonb) AS d (
        id bigint, attempt int, token uuid, status text, next_try_at timestamptz,
        in_doubt_since timestamptz, last_error text, message_id text, latency_ms int, status_code int, provider_code text, dead_letter bool,
        dl_reason text, dl_error text, topic text, kafka_partition int, kafka_offset bigint,
        uncounted bool, suppress_source text, unclaim bool, guarantee text)
), locked AS (
    SELECT s.id FROM email_sends s WHERE s.id = ANY(ARRAY(SELECT id FROM decided))
    ORDER BY s.id FOR UPDATE
), settled AS (
    UPDATE email_sends s
    SET status = d.status,
        attempts = CASE WHEN (d.uncounted OR d.unclaim) AND d.token IS NOT NULL
                        THEN s.attempts - 1 ELSE s.attempts END,
        first_tried_at = CASE WHEN d.unclaim THEN NULL ELSE s.first_tried_at END,
        provider = CASE WHEN d.unclaim THEN NULL ELSE s.provider END,
        provider_kind = CASE WHEN d.unclaim THEN NULL ELSE s.provider_kind END,
        provider_key = CASE WHEN d.unclaim THEN NULL ELSE s.provider_key END,
        guarantee = CASE WHEN d.unclaim THEN d.guarantee ELSE s.guarantee END,
        next_try_at = d.next_try_at,
        in_doubt_since = GREATEST(s.in_doubt_since, d.in_doubt_since),
        last_error = d.last_error,
        message_id = coalesce(d.message_id, s.message_id),
        provider_code = coalesce(d.provider_code, s.provider_code),
        accepted_at = CASE WHEN d.status = 'accepted' THEN now() ELSE s.accepted_at END,
        lease_until = NULL, lease_token = NULL, published_at = NULL
    FROM decided d
    WHERE s.id = ANY(ARRAY(SELECT id FROM locked)) AND s.id = d.id
      AND CASE WHEN d.token IS NULL
               THEN s.status = 'pending' AND s.attempts = d.attempt
               ELSE s.status = 'sending' AND s.lease_token = d.token END
    RETURNING s.id, s.dedupe_key, s.priority, s.template, s.attempts, d.status,
              d.status_code, d.provider_code, d.last_error, d.latency_ms, d.dead_letter, d.dl_reason,
              d.dl_error, d.topic, d.kafka_partition, d.kafka_offset, d.uncounted,
              s.to_address, d.suppress_source
), attempt AS (
    INSERT INTO email_attempts (
        send_id, attempt, outcome, status_code, provider_code, reason, latency_ms)
    SELECT id, attempts, status, status_code, provider_code, last_error, latency_ms
    FROM settled WHERE latency_ms IS NOT NULL AND NOT uncounted
), dead_letter AS (
    INSERT INTO email_dead_letters (
        send_id, dedupe_key, priority, template, reason, status_code, error, attempts,
        original_topic, original_partition, original_offset)
    SELECT id, dedupe_key, priority, template, dl_reason, status_code, dl_error, attempts,
           topic, kafka_partition, kafka_offset
    FROM settled WHERE dead_letter
), suppressed AS (
    INSERT INTO email_suppressions (address, reason, source)
    SELECT DISTINCT ON (lower(to_address)) lower(to_address), 'hard_bounce', suppress_source
    FROM settled WHERE suppress_source IS NOT NULL AND status = 'failed'
    ORDER BY lower(to_address)
    ON CONFLICT (address) DO UPDATE SET reason = EXCLUDED.reason, source = EXCLUDED.source
    WHERE email_suppressions.scope = 'bulk'
)
SELECT id FROM settled

-- name: insert_dead_letter
-- An undecodable Kafka message: no send row, the raw bytes kept; once per message.
INSERT INTO email_dead_letters (
    send_id, dedupe_key, priority, template, reason, status_code, error, attempts,
    original_topic, original_partition, original_offset, original_key, original_value)
VALUES (
    NULL, NULL, NULL, NULL, 'undecodable', NULL, %(error)s, 0,
    %(topic)s, %(partition)s, %(offset)s, %(key)s, %(value)s)
ON CONFLICT (original_topic, original_partition, original_offset)
    WHERE send_id IS NULL AND reason = 'undecodable' DO NOTHING

-- name: take_unresolved
-- Rows whose last call has no known outcome: `unknown` ones that are due, and `sending`
-- ones whose holder's lease ran out (it crashed or hung): their call may have started as
-- late as the lease's end, so that is when their doubt starts. Taken with a fresh lease.
-- The locking sub-select is an ARRAY(…), run once whatever the plan (relay/queries.sql,
-- claim_due).
UPDATE email_sends
SET status = 'sending', lease_token = %(token)s,
    lease_until = clock_timestamp() + make_interval(secs => %(lease_s)s),
    in_doubt_since = CASE WHEN status = 'sending'
                          THEN GREATEST(in_doubt_since, lease_until) ELSE in_doubt_since END
WHERE id = ANY(ARRAY(
    SELECT id FROM email_sends
    WHERE priority = ANY(%(priorities)s)
      AND ((status = 'sending' AND lease_until < clock_timestamp())
           OR (status = 'unknown' AND (next_try_at IS NULL OR next_try_at <= clock_timestamp())))
    ORDER BY priority, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING id, dedupe_key, to_address, template, payload_json, priority, status, attempts,
          expires_at, next_try_at, in_doubt_since, provider, created_at, first_tried_at,
          provider_key,
          coalesce((SELECT k.lives + 1 FROM email_key_lives k
                    WHERE k.dedupe_key = email_sends.dedupe_key), 1),
          NULL::text, campaign_id, provider_kind, clock_timestamp()

-- name: republish_stale
-- A pending row whose pointer was published long ago but never handled (a pointer lost
-- with a deleted topic, a consumer bug): hand it back to the relay. At most %(limit)s per
-- pass, oldest first, so a backlog that is merely slow is not flooded with copies.
-- The locking sub-select is an ARRAY(…), run once whatever the plan (relay/queries.sql,
-- claim_due).
UPDATE email_sends SET published_at = NULL
WHERE id = ANY(ARRAY(
    SELECT id FROM email_sends
    WHERE status = 'pending' AND priority = ANY(%(priorities)s)
      AND published_at < now() - make_interval(secs => %(after_s)s)
    ORDER BY published_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING id
