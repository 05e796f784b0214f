-- The audit of `mailbus console` (docs/guides/console.md): every action an operator took
-- in the browser, who, what, on what, when, and how many mails it touched. Written after
-- the action, by the console, under mailbus_operator; never updated or deleted by it.
CREATE TABLE IF NOT EXISTS console_audit (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    who     text        NOT NULL,  -- the user name (password file or proxy header)
    role    text        NOT NULL CHECK (role IN ('viewer', 'operator')),
    action  text        NOT NULL,  -- e.g. dlq_replay, campaign_create, suppress_add
    target  text        NOT NULL DEFAULT '',  -- a campaign id, an address, a filter
    mails   integer     NOT NULL DEFAULT 0,   -- mails the action touched
    detail  text        NOT NULL DEFAULT ''   -- what the console said back, secret-free
);

CREATE INDEX IF NOT EXISTS console_audit_at_idx ON console_audit (at);
