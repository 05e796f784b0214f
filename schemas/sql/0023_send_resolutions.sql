-- The audit of `mailbus send resolve` and `mailbus send cancel`: who settled or stopped a
-- send by hand, when, and how. Written in the same transaction as the guarded update of
-- the send, so it holds exactly the changes that happened.
CREATE TABLE IF NOT EXISTS email_send_resolutions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    send_id     bigint      NOT NULL REFERENCES email_sends (id) ON DELETE CASCADE,
    action      text        NOT NULL CHECK (action IN ('accepted', 'not_sent', 'cancelled')),
    from_status text        NOT NULL,  -- the send's status before: unknown or pending
    message_id  text        NULL,      -- --accepted MESSAGE_ID
    resolved_by text        NOT NULL,  -- MAILBUS_OPERATOR, else the OS user
    at          timestamptz NOT NULL DEFAULT now()
);

-- `mailbus send show KEY` reads a send's resolutions.
CREATE INDEX IF NOT EXISTS email_send_resolutions_send_id_idx
    ON email_send_resolutions (send_id);
