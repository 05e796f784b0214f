-- Each outbox NOTIFY names the transaction that sent it (issue 37): the payload is the
-- transaction's id and its start in microseconds, where it was empty. Every pointer worker
-- of a relay listens on the same channels and so gets every notification; the first worker
-- that takes one answers it and the others pass it by (relay/standby.py), where each used
-- to claim and find nothing. The start makes a name that no other transaction has, even
-- one given the same id after a failover, and that no one can send ahead of it. An empty
-- payload (`dlq replay`'s NOTIFY, a worker waking the others, or this function before
-- 0075) is answered by every worker, as before. A transaction's notifications on one
-- channel still fold into one.
-- Lock level: CREATE OR REPLACE FUNCTION takes no lock on a table; writers never wait. Its
-- owner and grants are kept.
CREATE OR REPLACE FUNCTION mailbus_notify_outbox_if_rows() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    name text := pg_current_xact_id()::text || '@'
        || (extract(epoch FROM now()) * 1000000)::bigint::text;
BEGIN
    IF TG_TABLE_NAME = 'email_sends' THEN
        IF EXISTS (SELECT 1 FROM added_rows WHERE priority = 'p0') THEN
            PERFORM pg_notify('mailbus_outbox_p0', name);
        END IF;
        IF EXISTS (SELECT 1 FROM added_rows WHERE priority <> 'p0') THEN
            PERFORM pg_notify('mailbus_outbox', name);
        END IF;
    ELSIF EXISTS (SELECT 1 FROM added_rows) THEN
        PERFORM pg_notify('mailbus_outbox', name);
    END IF;
    RETURN NULL;
END;
$$;
