-- A dead letter's outbox NOTIFY says it is one (issue 37): its payload is the
-- transaction's name (0075) after `dead-letter:`, a new send's the name alone. A pointer
-- worker woken only by new sends may skip the claim of dead letters, which was a
-- transaction of its own on every wake-up (BEGIN, an UPDATE that found nothing, COMMIT): at
-- a steady rate, one per send. It skips it while its last claim of dead letters left none
-- behind and is at most a polling interval old; a dead letter, an empty payload (`dlq
-- replay`'s), the polling interval or another worker's release makes it claim both
-- (relay/dead_letter_claims.py). A transaction that adds both sends and dead letters now
-- notifies twice. Rolling: a relay of the previous build takes the payload for a name and
-- claims both, as before.
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
        IF TG_TABLE_NAME = 'email_dead_letters' THEN
            name := 'dead-letter:' || name;
        END IF;
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
