-- Named queries of `mailbus send show / resolve` (consumer/send_admin.py); `cancel` is the
-- client's cancel_send (mailbus_client/queries.sql).

-- name: send_by_key
-- The send, and its key's life (one more than the lives retention recorded, migration 0048).
SELECT s.*,
       coalesce((SELECT k.lives + 1 FROM email_key_lives k WHERE k.dedupe_key = s.dedupe_key),
                1) AS key_life
FROM email_sends s WHERE s.dedupe_key = %(key)s

-- name: key_lives
SELECT lives FROM email_key_lives WHERE dedupe_key = %(key)s

-- name: send_shown_by_key
-- The console's: no payload, but its variables' names (migration 0052's view).
SELECT * FROM email_sends_shown WHERE dedupe_key = %(key)s

-- name: attempts
SELECT attempt, outcome, status_code, reason, latency_ms, at
FROM email_attempts WHERE send_id = %(send_id)s ORDER BY id

-- name: delivery_events
SELECT provider, event_id, type, bounce, occurred_at, received_at
FROM delivery_events WHERE message_id = %(message_id)s ORDER BY occurred_at, received_at

-- name: dead_letters
SELECT id, created_at, reason, status_code, attempts, error, replayed_at
FROM email_dead_letters WHERE send_id = %(send_id)s ORDER BY id

-- name: resolutions
SELECT action, from_status, message_id, resolved_by, db_user, at
FROM email_send_resolutions WHERE send_id = %(send_id)s ORDER BY id

-- name: resolve_accepted
-- A send in `unknown` that the operator found accepted at the provider (its id given).
UPDATE email_sends
SET status = 'accepted', message_id = %(message_id)s, next_try_at = NULL,
    last_error = NULL, updated_at = now()
WHERE dedupe_key = %(key)s AND status = 'unknown'
RETURNING id, 'unknown' AS from_status

-- name: resolve_not_sent
-- A send in `unknown` that the operator found the provider never accepted: pending again
-- under the same key, due now, and sent again whatever the provider offers. The operator's
-- word settles the doubt of its earlier calls (`in_doubt_since` cleared, so no resend window
-- or "waits for an operator" gate holds it back again); were the operator wrong, the mail
-- goes out twice, so the row is recorded as sent `at_least_once` (the claim keeps that).
-- Its provider's kind is forgotten (migration 0071): no provider took it, so a primary
-- switched since (MAILBUS_PROVIDER postmark → resend) may send it; its route stays, a
-- fallback's without its kind (`fallback:sendgrid` → `fallback`: the fallback configured
-- now, mailbus/kernel/send_routes.py), so a fallback switched since may send it too.
UPDATE email_sends
SET status = 'pending', next_try_at = NULL, in_doubt_since = NULL, provider_kind = NULL,
    provider = CASE WHEN provider LIKE 'fallback:%%' THEN 'fallback' ELSE provider END,
    guarantee = 'at_least_once', last_error = 'resolved by hand: not sent, sent again',
    updated_at = now()
WHERE dedupe_key = %(key)s AND status = 'unknown'
RETURNING id, 'unknown' AS from_status

-- name: record_resolution
INSERT INTO email_send_resolutions (send_id, action, from_status, message_id, resolved_by)
VALUES (%(send_id)s, %(action)s, %(from_status)s, %(message_id)s, %(by)s)
