-- mailbus: locking (builds indexes on email_suppressions and email_dead_letters under SHARE: their writes, and every settle, wait)
-- Guards the delivery path relies on (issue "Close the holes found in exactly-once delivery").

-- The start of the latest call whose outcome was never known (a timeout, a dropped
-- connection, a lapsed lease). A "not found" look-up ends such a mail as failed, expired or
-- suppressed only once the provider can no longer be working on that call.
ALTER TABLE email_sends ADD COLUMN IF NOT EXISTS in_doubt_since timestamptz NULL;

-- Suppressions match addresses case-insensitively: the consumer compares lower() of both.
CREATE INDEX IF NOT EXISTS email_suppressions_lower_address_idx
    ON email_suppressions (lower(address));

-- One dead letter per undecodable Kafka message: a retry after a lost reply, or a second
-- consumer after a rebalance, records it once. Earlier copies (never replayed: there is no
-- send to replay) are folded into the first.
DELETE FROM email_dead_letters later
USING email_dead_letters first
WHERE later.send_id IS NULL AND first.send_id IS NULL
  AND later.reason = 'undecodable' AND first.reason = 'undecodable'
  AND later.original_topic = first.original_topic
  AND later.original_partition = first.original_partition
  AND later.original_offset = first.original_offset
  AND later.id > first.id
  AND NOT EXISTS (SELECT 1 FROM email_replays r WHERE r.dead_letter_id = later.id);
CREATE UNIQUE INDEX IF NOT EXISTS email_dead_letters_undecodable_once_idx
    ON email_dead_letters (original_topic, original_partition, original_offset)
    WHERE send_id IS NULL AND reason = 'undecodable';
