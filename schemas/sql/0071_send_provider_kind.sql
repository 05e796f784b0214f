-- The kind of the provider a send's first claim went to (postmark, resend, http, ...), as
-- the fallback's route records its own (`fallback:<kind>`, mailbus/kernel/send_routes.py).
-- email_sends.provider is NULL for the default provider, so consumers restarted with
-- another MAILBUS_PROVIDER (postmark → resend) looked a mail left `unknown` at Postmark up
-- at Resend, found nothing and sent it again: accepted by two. The claim records the kind
-- (consumer/queries.sql) and refuses a retry for another; a consumer whose provider is of
-- another kind neither calls nor looks the row up (consumer/routing.py). NULL: claimed
-- before this migration (any kind, as before). `provider` is unchanged: the webhooks
-- match events on it as before. `mailbus send resolve --not-sent` (the operator's role)
-- forgets the kind: no provider took the mail, so the primary configured now sends it.
-- Lock level: ADD COLUMN (nullable, no default: the catalogue only) holds email_sends'
-- ACCESS EXCLUSIVE lock for an instant, taken with migrate's lock timeout; GRANT takes none.
ALTER TABLE email_sends ADD COLUMN IF NOT EXISTS provider_kind text NULL;
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_consumer') THEN
        GRANT UPDATE (provider_kind) ON email_sends TO mailbus_consumer;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_operator') THEN
        GRANT UPDATE (provider_kind) ON email_sends TO mailbus_operator;
    END IF;
END $$;
