-- A provider's event that proves it took a mail and carries the mail's key (SendGrid's
-- custom_args, Mailgun's v: variables: providers with neither an idempotency key nor a
-- look-up) may come while its send is still `sending` (the consumer's call in flight) and
-- so cannot settle it yet. The event is kept with that key (`provider_key`, the key the
-- provider echoed: mailbus/kernel/provider_key.py), and the receiver's sweep settles the
-- send with it once the send is `unknown`, or `pending` after a call (feedback/events.sql,
-- settle_from_events). Adding a NULL column without a default changes only the catalogue:
-- the brief ACCESS EXCLUSIVE lock on delivery_events never rewrites it.
ALTER TABLE delivery_events ADD COLUMN IF NOT EXISTS provider_key text NULL;

-- The receiver stores the key, and settles only sends that were tried (`attempts`), as
-- schemas/sql/roles/grants.sql grants it.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_webhooks') THEN
        GRANT INSERT (provider_key) ON delivery_events TO mailbus_webhooks;
        GRANT SELECT (attempts) ON email_sends TO mailbus_webhooks;
    END IF;
END $$;
