-- The webhook receiver puts a delivery event applied to a send into that send's trace
-- (docs/guides/tracing.md): record_events (feedback/events.sql) reads the send's
-- traceparent and tracestate. Granted here when the role exists, so a receiver of this
-- build works before `mailbus migrate --roles` runs again; schemas/sql/roles/grants.sql
-- carries the same grant. A grant changes the catalog only: writers never wait for it.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_webhooks') THEN
        GRANT SELECT (traceparent, tracestate) ON email_sends TO mailbus_webhooks;
    END IF;
END $$;
