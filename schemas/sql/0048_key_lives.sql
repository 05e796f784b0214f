-- A dedupe key enqueued again after retention deleted its row is a new mail, sent under a
-- new key (docs/retention.md#a-key-enqueued-again, docs/providers.md#the-key-the-provider-sees):
-- the provider may still remember the old one and would answer with the old mail's id.
--
-- email_key_lives: how many rows (lives) each deleted dedupe key had, counted by a trigger
-- in the transaction that deletes the row, whoever deletes it (`mailbus retention run`, or
-- the owner by hand). A row's life is one more (1 for a key never deleted). It is read when the consumer loads a row, not by a
-- trigger at enqueue: an INSERT that waited for retention's delete of the same key would
-- have read the table before that commit, and the enqueue path stays one probe of the
-- dedupe key's index. While a row exists no other row of its key can be deleted, so its
-- life, read any time after its insert committed, is always the same.
-- One narrow row per key ever deleted; it is never deleted itself (a provider that keeps
-- keys forever, like the http dialect's, still knows every old life).
CREATE TABLE IF NOT EXISTS email_key_lives (
    dedupe_key text COLLATE "C" PRIMARY KEY,
    lives      int         NOT NULL CHECK (lives >= 1),
    retired_at timestamptz NOT NULL DEFAULT now()
);

-- One INSERT per DELETE statement (a transition table, not a trigger per row): a key has
-- one row at a time, so each deleted row is one more life of its key. It runs with the
-- deleting role's rights: mailbus_retention may write the table (below); TRUNCATE, which
-- fires no row or DELETE trigger, forgets the lives.
CREATE OR REPLACE FUNCTION mailbus_count_key_lives() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO email_key_lives AS k (dedupe_key, lives)
    SELECT dedupe_key, 1 FROM deleted_sends
    ON CONFLICT (dedupe_key) DO UPDATE SET lives = k.lives + 1, retired_at = now();
    RETURN NULL;
END;
$$;

-- email_sends.provider_key: the key the row was first sent under (its prefix, dedupe key
-- and life: mailbus/kernel/provider_key.py), written by its first claim and never changed
-- after, so every later call, look-up and resend of the row uses the key the provider saw
-- first, even after MAILBUS_PROVIDER_KEY_PREFIX changed. NULL: never claimed by this
-- build (a row claimed before 0048, or by an older build during a rollout, went out under
-- its bare dedupe key). A nullable column without a default is a catalog change: no
-- rewrite, no scan. Its ACCESS EXCLUSIVE lock is held for an instant, but while it waits
-- for a long transaction every enqueue queues behind it: `mailbus migrate` takes it with a
-- short lock timeout and tries again (docs/runbook.md#upgrades). The trigger is created
-- under the same lock.
ALTER TABLE email_sends ADD COLUMN IF NOT EXISTS provider_key text NULL;
CREATE OR REPLACE TRIGGER email_sends_count_key_lives
    AFTER DELETE ON email_sends REFERENCING OLD TABLE AS deleted_sends
    FOR EACH STATEMENT EXECUTE FUNCTION mailbus_count_key_lives();

-- The roles of schemas/sql/roles/grants.sql (which carries the same grants), when they
-- exist: the consumer reads the lives where it loads a row (it writes provider_key with
-- its UPDATE on the table); retention's deletes count the lives (the trigger reads the
-- deleted keys and writes the table as the deleting role); the operator (`send show`, the
-- console) reads everything.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_consumer') THEN
        GRANT SELECT ON email_key_lives TO mailbus_consumer;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_retention') THEN
        GRANT SELECT, INSERT, UPDATE ON email_key_lives TO mailbus_retention;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_operator') THEN
        GRANT SELECT ON email_key_lives TO mailbus_operator;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_console') THEN
        GRANT SELECT ON email_key_lives TO mailbus_console;
    END IF;
END $$;
