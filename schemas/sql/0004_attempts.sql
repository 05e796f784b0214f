-- One row per provider call: the attempt history of a send (`mailbus dlq show`), and what
-- `mailbus status` computes failure and 429 rates from. Written in the same transaction
-- as the outcome it led to.
CREATE TABLE email_attempts (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    send_id     bigint NOT NULL REFERENCES email_sends (id) ON DELETE CASCADE,
    attempt     int NOT NULL,
    outcome     text NOT NULL,      -- the status the call led to: accepted, pending, failed, ...
    status_code int NULL,
    reason      text NULL,
    latency_ms  int NULL,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX email_attempts_send_idx ON email_attempts (send_id);
CREATE INDEX email_attempts_at_idx ON email_attempts (at);
