-- Each outbox NOTIFY names the transaction that sent it (issue 37): the payload is the
-- transaction's id and its start in microseconds, where it was empty. Every pointer worker
-- of a relay listens on the same channels and so gets every notification; the first worker
-- that takes one answers it and the others pass it by (relay/standby.py), where each used
-- to claim and find nothing. The start keeps a name from being another transaction's,
-- even one given the same id after a failover. The name is made only when rows were
-- added: a statement that adds none (a duplicate's ON CONFLICT DO NOTHING, a refused
-- enqueue_bounded) is given no transaction id for it. An empty payload (`dlq replay`'s
-- NOTIFY, or this function before 0075) is answered by every worker, as before. A
-- transaction's notifications on one channel still fold into one.
-- Lock level: CREATE OR REPLACE FUNCTION takes no lock on a table; writers never wait. Its
-- owner and grants are kept.
CREATE OR REPLACE FUNCTION mailbus_notify_outbox_if_rows() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    p0 boolean := false;
    others boolean;
    name text;
BEGIN
    IF TG_TABLE_NAME = 'email_sends' THEN
        p0 := EXISTS (SELECT 1 FROM added_rows WHERE priority = 'p0');
        others := EXISTS (SELECT 1 FROM added_rows WHERE priority <> 'p0');
    ELSE
        others := EXISTS (SELECT 1 FROM added_rows);
    END IF;
    IF p0 OR others THEN  -- rows were added: the transaction has its id already
        name := pg_current_xact_id()::text || '@'
            || (extract(epoch FROM now()) * 1000000)::bigint::text;
    END IF;
    IF p0 THEN
        PERFORM pg_notify('mailbus_outbox_p0', name);
    END IF;
    IF others THEN
        PERFORM pg_notify('mailbus_outbox', name);
    END IF;
    RETURN NULL;
END;
$$;
