-- mailbus: locking (a CHECK constraint scans email_sends under ACCESS EXCLUSIVE: enqueues wait)
-- What a row was sent under, and when its first call started (issue 20).
-- guarantee: exactly_once (the provider has an idempotency key or a look-up), at_most_once
-- or at_least_once (neither; MAILBUS_UNKNOWN_OUTCOME), written by the claim that sends it.
-- first_tried_at: the database's clock at the first claim; an idempotency key's window
-- counts from it.
ALTER TABLE email_sends ADD COLUMN IF NOT EXISTS guarantee text NULL;
ALTER TABLE email_sends ADD COLUMN IF NOT EXISTS first_tried_at timestamptz NULL;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'email_sends_guarantee_check') THEN
        ALTER TABLE email_sends ADD CONSTRAINT email_sends_guarantee_check
            CHECK (guarantee IN ('exactly_once', 'at_most_once', 'at_least_once'));
    END IF;
END $$;
