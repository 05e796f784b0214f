-- The audit of `mailbus dlq replay`: one row per dead letter put back to pending, written in
-- the same transaction as the dead letter's replayed_at and the send's failed -> pending
-- move, so the audit holds exactly the replays that happened. Dry runs change nothing and
-- are not recorded.
CREATE TABLE email_replays (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dead_letter_id bigint      NOT NULL REFERENCES email_dead_letters (id),
    send_id        bigint      NULL,      -- the send put back to pending
    replayed_by    text        NOT NULL,  -- MAILBUS_OPERATOR, else the OS user
    reason         text        NOT NULL,  -- `--why`
    at             timestamptz NOT NULL DEFAULT now()
);

-- `mailbus dlq show ID` reads a dead letter's replays.
CREATE INDEX email_replays_dead_letter_id_idx ON email_replays (dead_letter_id);
