-- mailbus: locking (adds a CHECKed column to email_sends: a scan under ACCESS EXCLUSIVE, enqueues wait)
-- Delivery events (docs/reference/contract.md#delivery-events): what the provider says happened after
-- `accepted`. Each event is stored once per (provider, event id); the send it names by
-- message_id shows its latest event in delivery_status / last_event_at.
ALTER TABLE email_sends
    ADD COLUMN IF NOT EXISTS delivery_status text NULL
        CHECK (delivery_status IN ('delivered', 'deferred', 'bounced', 'complained')),
    ADD COLUMN IF NOT EXISTS last_event_at timestamptz NULL;

CREATE TABLE IF NOT EXISTS delivery_events (
    provider    text        NOT NULL,  -- the {provider} of POST /webhooks/{provider}
    event_id    text        NOT NULL,
    type        text        NOT NULL CHECK (type IN ('delivered', 'deferred', 'bounced', 'complained')),
    bounce      text        NULL CHECK (bounce IN ('hard', 'soft')),
    message_id  text        NOT NULL,
    occurred_at timestamptz NOT NULL,
    matched     boolean     NOT NULL,  -- a send with this message_id existed when it came
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, event_id)
);

-- What `mailbus status` counts: events of the last hour and day.
CREATE INDEX IF NOT EXISTS delivery_events_received_at_idx ON delivery_events (received_at);
-- Events of a message.
CREATE INDEX IF NOT EXISTS delivery_events_message_id_idx ON delivery_events (message_id);
-- What the receiver's sweep scans: events that came before their send recorded its
-- message_id (the provider's answer and the consumer's settle race the first event).
CREATE INDEX IF NOT EXISTS delivery_events_unmatched_idx ON delivery_events (received_at)
    WHERE NOT matched;

-- Who put an address on the list: 'manual' (SQL), 'cli', 'import', 'webhook:<provider>'.
ALTER TABLE email_suppressions ADD COLUMN IF NOT EXISTS source text NOT NULL DEFAULT 'manual';
