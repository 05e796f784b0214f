-- The transactional outbox: one row per mail, written by domain services in their own
-- transaction. The table is the source of truth; Kafka only carries pointers to rows.
CREATE TABLE email_sends (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dedupe_key    text        NOT NULL,
    to_address    text        NOT NULL,
    template      text        NOT NULL,
    payload_json  jsonb       NOT NULL DEFAULT '{}',
    priority      text        NOT NULL DEFAULT 'p1' CHECK (priority IN ('p0', 'p1', 'p2')),
    status        text        NOT NULL DEFAULT 'pending' CHECK (status IN
                      ('pending', 'sending', 'accepted', 'failed', 'unknown', 'expired', 'suppressed')),
    attempts      int         NOT NULL DEFAULT 0,
    next_try_at   timestamptz NULL,
    expires_at    timestamptz NULL,
    message_id    text        NULL,
    last_error    text        NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    -- Relay bookkeeping: when the current attempt's pointer was acknowledged by Kafka.
    -- NULL on a pending row means "to be published when due".
    published_at  timestamptz NULL,
    -- Delivery bookkeeping: a `sending` row is owned until lease_until.
    lease_until   timestamptz NULL,
    accepted_at   timestamptz NULL,
    CONSTRAINT email_sends_dedupe_key_key UNIQUE (dedupe_key)
);

CREATE INDEX email_sends_message_id_idx ON email_sends (message_id) WHERE message_id IS NOT NULL;

-- What the relay scans: pending rows not yet on Kafka, most urgent priority first.
CREATE INDEX email_sends_relay_due_idx ON email_sends (priority, id)
    WHERE status = 'pending' AND published_at IS NULL;

-- What `status` and the reconciler scan: everything not yet terminal.
CREATE INDEX email_sends_open_idx ON email_sends (status, priority, created_at)
    WHERE status IN ('pending', 'sending', 'unknown');

CREATE TABLE email_suppressions (
    address    text PRIMARY KEY,
    reason     text NOT NULL DEFAULT 'manual',
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One NOTIFY per statement, not per row: a 10,000-row INSERT wakes the relay once.
-- Fires for inserts only: rows put back to pending (retries, replays) are found when the
-- relay wakes for the earliest next_try_at or its poll interval, whichever comes first.
CREATE FUNCTION mailbus_notify_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mailbus_outbox', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER email_sends_notify_insert
    AFTER INSERT ON email_sends
    FOR EACH STATEMENT EXECUTE FUNCTION mailbus_notify_outbox();

CREATE FUNCTION mailbus_touch_updated_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;

CREATE TRIGGER email_sends_touch
    BEFORE UPDATE ON email_sends
    FOR EACH ROW EXECUTE FUNCTION mailbus_touch_updated_at();
