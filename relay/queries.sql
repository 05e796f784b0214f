-- name: claim_due
-- Marks a batch of due rows published and returns them; the transaction stays open
-- until Kafka acknowledged every pointer, so a crash before that undoes the claim.
UPDATE email_sends SET published_at = now()
WHERE id IN (
    SELECT id FROM email_sends
    WHERE status = 'pending' AND published_at IS NULL
      AND (next_try_at IS NULL OR next_try_at <= now())
    ORDER BY priority, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id, dedupe_key, priority, attempts, created_at

-- name: unclaim
UPDATE email_sends SET published_at = NULL WHERE id = ANY(%(ids)s)

-- name: seconds_until_next_due
SELECT extract(epoch FROM min(next_try_at) - now())
FROM email_sends
WHERE status = 'pending' AND published_at IS NULL AND next_try_at > now()

-- name: claim_dead_letters
-- Same claim as claim_due, for email_dead_letters; the columns are the fields of
-- schemas.dead_letter.DeadLetter.
UPDATE email_dead_letters SET published_at = now()
WHERE id IN (
    SELECT id FROM email_dead_letters
    WHERE published_at IS NULL
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id, send_id, dedupe_key, priority, template, reason, status_code, error, attempts,
          original_topic, original_partition, original_offset, original_key, original_value,
          created_at

-- name: unclaim_dead_letters
UPDATE email_dead_letters SET published_at = NULL WHERE id = ANY(%(ids)s)
