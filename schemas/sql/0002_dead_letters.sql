-- Dead letters: one row per message that will not be delivered, written by the consumer
-- in the same transaction as the send's `failed` status (or, for a Kafka message that
-- cannot even be decoded, as the record of that message). The relay publishes each row
-- to `{prefix}.send.dlq` exactly like a send pointer, so none is lost between PostgreSQL
-- and Kafka; `mailbus dlq list/show/replay` read this table.
CREATE TABLE email_dead_letters (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    send_id            bigint      NULL REFERENCES email_sends (id),  -- NULL: undecodable message
    dedupe_key         text        NULL,
    priority           text        NULL,
    template           text        NULL,
    reason             text        NOT NULL,  -- 'rejected', 'max_attempts', 'invalid_address', 'undecodable', ...
    status_code        int         NULL,      -- the provider's HTTP status, when there was one
    error              text        NOT NULL DEFAULT '',  -- short, secret-free excerpt
    attempts           int         NOT NULL DEFAULT 0,
    original_topic     text        NULL,
    original_partition int         NULL,
    original_offset    bigint      NULL,
    original_key       bytea       NULL,      -- kept for undecodable messages
    original_value     bytea       NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    -- Relay bookkeeping: when Kafka acknowledged the DLQ record; NULL = to be published.
    published_at       timestamptz NULL,
    -- Set by `mailbus dlq replay` when the send was put back to pending.
    replayed_at        timestamptz NULL
);

-- What the relay scans: dead letters not yet on Kafka, oldest first.
CREATE INDEX email_dead_letters_unpublished_idx ON email_dead_letters (id)
    WHERE published_at IS NULL;

-- What `mailbus dlq list` and `replay --since` scan.
CREATE INDEX email_dead_letters_created_at_idx ON email_dead_letters (created_at);

-- The foreign key's own index: finds a send's dead letters, keeps deletes of sends cheap.
CREATE INDEX email_dead_letters_send_id_idx ON email_dead_letters (send_id)
    WHERE send_id IS NOT NULL;

-- Wakes the relay, once per statement (the function of 0001_outbox.sql).
CREATE TRIGGER email_dead_letters_notify_insert
    AFTER INSERT ON email_dead_letters
    FOR EACH STATEMENT EXECUTE FUNCTION mailbus_notify_outbox();
