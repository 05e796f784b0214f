-- Delivery events, issue 34 (docs/guides/delivery-events.md):
-- * `dropped`: mail a provider accepted and then reports it did not send (SES Rendering
--   Failure/Reject, Resend email.failed/suppressed, SendGrid dropped, Mailgun rejected and
--   its permanent failures that are not bounces). The CHECKs of 0010 are replaced by wider
--   ones: ADD CONSTRAINT ... NOT VALID checks new rows only and scans nothing (every
--   existing row passed the narrower check), so each table is locked for an instant.
-- * delivery_events.reason: the provider's own words for a drop or a failure;
--   delivery_events.suppression: the email_suppressions reason an event adds when it is
--   not its type's own (a Mailgun drop for an unsubscribed address: 'unsubscribed'), so a
--   late event suppresses as the event did. Nullable, no default: catalog changes only.
-- * webhook_tokens: the Mailgun signature tokens seen within the tolerance window, shared
--   by every `mailbus webhooks` replica, pruned by them; a token seen with other event data
--   is a replay (Mailgun signs timestamp + token, not the body).

ALTER TABLE email_sends DROP CONSTRAINT IF EXISTS email_sends_delivery_status_check;
ALTER TABLE email_sends ADD CONSTRAINT email_sends_delivery_status_check
    CHECK (delivery_status IN ('delivered', 'deferred', 'bounced', 'complained', 'dropped'))
    NOT VALID;
ALTER TABLE delivery_events DROP CONSTRAINT IF EXISTS delivery_events_type_check;
ALTER TABLE delivery_events ADD CONSTRAINT delivery_events_type_check
    CHECK (type IN ('delivered', 'deferred', 'bounced', 'complained', 'dropped')) NOT VALID;
ALTER TABLE delivery_events ADD COLUMN IF NOT EXISTS reason text NULL;
ALTER TABLE delivery_events ADD COLUMN IF NOT EXISTS suppression text NULL;

CREATE TABLE IF NOT EXISTS webhook_tokens (
    provider   text        NOT NULL,
    token      text        NOT NULL,
    digest     bytea       NOT NULL,  -- SHA-256 of what the token was first seen with
    seen_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, token)
);
-- What the receivers' prune deletes: tokens older than the tolerance window.
CREATE INDEX IF NOT EXISTS webhook_tokens_seen_at_idx ON webhook_tokens (seen_at);

-- The receivers may run before `mailbus migrate --roles` runs again: granted here too when
-- the role exists; schemas/sql/roles/grants.sql carries the same grant.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_webhooks') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON webhook_tokens TO mailbus_webhooks;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_operator') THEN
        GRANT SELECT ON webhook_tokens TO mailbus_operator;  -- it reads every table
    END IF;
END $$;
