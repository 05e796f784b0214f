-- mailbus: locking (builds an index on email_dead_letters under SHARE: dead letters and settles wait)
-- The intake records each event it rejects as a dead letter (send_id NULL, reason
-- 'intake_undecodable' or 'intake_invalid'), in the transaction of its batch's rows, so
-- `mailbus dlq list/show` show them; it publishes them to `{prefix}.intake.dlq` itself,
-- so the rows are written already marked published. An event read again after a crash
-- must not make a second letter: one letter per intake event, found by where it was read.
CREATE UNIQUE INDEX IF NOT EXISTS email_dead_letters_intake_origin_idx
    ON email_dead_letters (original_topic, original_partition, original_offset)
    WHERE reason IN ('intake_undecodable', 'intake_invalid');
