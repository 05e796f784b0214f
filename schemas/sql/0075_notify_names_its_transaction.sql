-- Each outbox NOTIFY names the transaction that sent it (issue 37): the payload is the
-- transaction's id, where it was empty. Every pointer worker of a relay listens on the same
-- channels and so gets every notification; the first worker that takes one answers it and
-- the others pass it by (relay/standby.py), where each used to claim and find nothing. An
-- empty payload (`dlq replay`'s NOTIFY, or this function before 0075) is answered by every
-- worker, as before. A transaction's notifications on one channel still fold into one.
-- Lock level: CREATE OR REPLACE FUNCTION takes no lock on a table; writers never wait.
CREATE OR REPLACE FUNCTION mailbus_notify_outbox_if_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'email_sends' THEN
        IF EXISTS (SELECT 1 FROM added_rows WHERE priority = 'p0') THEN
            PERFORM pg_notify('mailbus_outbox_p0', pg_current_xact_id()::text);
        END IF;
        IF EXISTS (SELECT 1 FROM added_rows WHERE priority <> 'p0') THEN
            PERFORM pg_notify('mailbus_outbox', pg_current_xact_id()::text);
        END IF;
    ELSIF EXISTS (SELECT 1 FROM added_rows) THEN
        PERFORM pg_notify('mailbus_outbox', pg_current_xact_id()::text);
    END IF;
    RETURN NULL;
END;
$$;
