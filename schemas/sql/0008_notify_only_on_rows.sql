-- A statement-level trigger fires even when its statement touched no row, and the consumer's
-- settle statement carries a dead-letter INSERT that usually inserts nothing: every recorded
-- outcome woke the relay for an empty claim. Wake it only when rows were really added.
CREATE FUNCTION mailbus_notify_outbox_if_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM added_rows) THEN
        PERFORM pg_notify('mailbus_outbox', '');
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER email_sends_notify_insert ON email_sends;
CREATE TRIGGER email_sends_notify_insert
    AFTER INSERT ON email_sends REFERENCING NEW TABLE AS added_rows
    FOR EACH STATEMENT EXECUTE FUNCTION mailbus_notify_outbox_if_rows();

DROP TRIGGER email_dead_letters_notify_insert ON email_dead_letters;
CREATE TRIGGER email_dead_letters_notify_insert
    AFTER INSERT ON email_dead_letters REFERENCING NEW TABLE AS added_rows
    FOR EACH STATEMENT EXECUTE FUNCTION mailbus_notify_outbox_if_rows();

DROP FUNCTION mailbus_notify_outbox();
