-- A NOTIFY channel of P0's own (issue 37: "P0 while a campaign drains"): an insert of P0
-- sends notifies `mailbus_outbox_p0`, which the relay's P0 lane alone listens to; other
-- sends and dead letters notify `mailbus_outbox`, the pointer lane's, as before. So a
-- password reset wakes one small claim, not every pointer worker of every relay for claims
-- that find nothing, and the campaign's inserts never wake the P0 lane
-- (relay/relay.py, docs/benchmarks/speed.md). A relay without a P0 lane listens to both.
-- Rows put back to pending (retries, replays) are found as before: the earliest
-- next_try_at, the poll interval, or `dlq replay`'s own NOTIFY on `mailbus_outbox`.
-- Lock level: CREATE OR REPLACE FUNCTION takes no lock on a table; writers never wait.
CREATE OR REPLACE FUNCTION mailbus_notify_outbox_if_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'email_sends' THEN
        IF EXISTS (SELECT 1 FROM added_rows WHERE priority = 'p0') THEN
            PERFORM pg_notify('mailbus_outbox_p0', '');
        END IF;
        IF EXISTS (SELECT 1 FROM added_rows WHERE priority <> 'p0') THEN
            PERFORM pg_notify('mailbus_outbox', '');
        END IF;
    ELSIF EXISTS (SELECT 1 FROM added_rows) THEN
        PERFORM pg_notify('mailbus_outbox', '');
    END IF;
    RETURN NULL;
END;
$$;
