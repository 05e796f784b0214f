-- Outcome events out (issue 11): every change of a send's outcome is recorded here by a
-- trigger, in the transaction that made the change, and published by the relay to
-- `{prefix}.send.events` (schemas/send_event.avsc). Being a trigger, it covers every path
-- that changes a send (consumer, webhooks, reconciler, campaigns, dlq replay, plain SQL).
-- Reported: status reaching accepted, failed, unknown, expired or suppressed (pending and
-- sending are internal), and delivery_status reaching a new value.
CREATE TABLE IF NOT EXISTS email_send_events (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- the event id
    send_id         bigint      NOT NULL,  -- email_sends.id (no FK: events may outlive it)
    dedupe_key      text        NOT NULL,  -- also the Kafka key: one send, one partition
    template        text        NOT NULL,
    event           text        NOT NULL,  -- the state this change reached
    status          text        NOT NULL,  -- email_sends.status after the change
    delivery_status text        NULL,      -- email_sends.delivery_status after the change
    message_id      text        NULL,
    error           text        NULL,      -- last_error, for failed/unknown/expired/suppressed
    occurred_at     timestamptz NOT NULL,  -- the change's time; for delivery, the provider's
    -- Relay bookkeeping: when Kafka acknowledged the event; NULL = to be published.
    published_at    timestamptz NULL
);

-- What the relay scans: events not yet on Kafka, in id order.
CREATE INDEX IF NOT EXISTS email_send_events_unpublished_idx ON email_send_events (id)
    WHERE published_at IS NULL;
-- What the relay's prune scans: published events past their retention.
CREATE INDEX IF NOT EXISTS email_send_events_published_idx ON email_send_events (published_at)
    WHERE published_at IS NOT NULL;

-- One row per reported change; a status and a delivery change in one UPDATE give two rows,
-- status first. Wakes the relay's event lane on a channel of its own, so outcomes never wake
-- the pointer lane for an empty claim (pg_notify folds repeats in a transaction into one).
-- SECURITY DEFINER: whichever least-privilege role changes a send (consumer, webhooks,
-- relay, operator; schemas/sql/roles/grants.sql) records its event without a grant on the
-- events table of its own.
CREATE OR REPLACE FUNCTION mailbus_record_send_event() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.status IN ('accepted', 'failed', 'unknown', 'expired', 'suppressed')
       AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM NEW.status) THEN
        INSERT INTO email_send_events (send_id, dedupe_key, template, event, status,
                                       delivery_status, message_id, error, occurred_at)
        VALUES (NEW.id, NEW.dedupe_key, NEW.template, NEW.status, NEW.status,
                NEW.delivery_status, NEW.message_id,
                CASE WHEN NEW.status <> 'accepted' THEN NEW.last_error END, NEW.updated_at);
    END IF;
    IF NEW.delivery_status IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.delivery_status IS DISTINCT FROM NEW.delivery_status) THEN
        INSERT INTO email_send_events (send_id, dedupe_key, template, event, status,
                                       delivery_status, message_id, occurred_at)
        VALUES (NEW.id, NEW.dedupe_key, NEW.template, NEW.delivery_status, NEW.status,
                NEW.delivery_status, NEW.message_id, coalesce(NEW.last_event_at, now()));
    END IF;
    PERFORM pg_notify('mailbus_send_events', '');
    RETURN NULL;
END;
$$;

-- The WHEN clauses are evaluated in C for every row: the churn between pending and sending,
-- and the relay's published_at marks (not in the column list), never call the function.
DROP TRIGGER IF EXISTS email_sends_record_event_update ON email_sends;
CREATE TRIGGER email_sends_record_event_update
    AFTER UPDATE OF status, delivery_status ON email_sends
    FOR EACH ROW
    WHEN ((OLD.status IS DISTINCT FROM NEW.status
           AND NEW.status IN ('accepted', 'failed', 'unknown', 'expired', 'suppressed'))
          OR (OLD.delivery_status IS DISTINCT FROM NEW.delivery_status
              AND NEW.delivery_status IS NOT NULL))
    EXECUTE FUNCTION mailbus_record_send_event();

-- Rows written already in a reported state (e.g. suppressed at enqueue).
DROP TRIGGER IF EXISTS email_sends_record_event_insert ON email_sends;
CREATE TRIGGER email_sends_record_event_insert
    AFTER INSERT ON email_sends
    FOR EACH ROW
    WHEN (NEW.status IN ('accepted', 'failed', 'unknown', 'expired', 'suppressed')
          OR NEW.delivery_status IS NOT NULL)
    EXECUTE FUNCTION mailbus_record_send_event();
