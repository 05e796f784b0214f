-- W3C trace context of a mail (docs/guides/tracing.md): the enqueuing transaction may fill
-- traceparent (and tracestate) with the context of its own span; the relay carries them in
-- the send pointer's Kafka headers to the consumer, which continues the trace. Optional and
-- unchecked here: a malformed value is ignored and counted, never refused (a CHECK would
-- fail the domain service's transaction). Nullable columns without a default are a
-- catalog change only: no rewrite, no scan, the table lock held for an instant.
ALTER TABLE email_sends ADD COLUMN IF NOT EXISTS traceparent text NULL;
ALTER TABLE email_sends ADD COLUMN IF NOT EXISTS tracestate text NULL;
-- A domain service (and the intake) may write them before `mailbus migrate --roles` runs
-- again: granted here too when the roles exist; schemas/sql/roles/grants.sql carries the
-- same grants.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_enqueuer') THEN
        GRANT INSERT (traceparent, tracestate) ON email_sends TO mailbus_enqueuer;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_intake') THEN
        GRANT INSERT (traceparent, tracestate) ON email_sends TO mailbus_intake;
    END IF;
END $$;
