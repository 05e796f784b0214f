-- mailbus: locking (a CHECKed column and an index on email_sends: a scan and a build while enqueues wait)
-- Bulk campaigns (issue 10). The audience is imported once into campaign_recipients; the
-- pacer (hosted by `mailbus relay`, or `mailbus campaign run`) then writes email_sends rows
-- as the campaign's pace allows, advancing `checkpoint` in the transaction that wrote them.
CREATE TABLE IF NOT EXISTS campaigns (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text        NOT NULL,
    template       text        NOT NULL,
    priority       text        NOT NULL DEFAULT 'p2' CHECK (priority IN ('p0', 'p1', 'p2')),
    state          text        NOT NULL DEFAULT 'draft' CHECK (state IN
                       ('draft', 'running', 'paused', 'finished', 'cancelled')),
    rate_per_min   bigint      NOT NULL CHECK (rate_per_min > 0),
    window_start   time        NULL,  -- UTC; both NULL: any time of day
    window_end     time        NULL,
    daily_cap      bigint      NULL CHECK (daily_cap > 0),
    warmup         bigint[]    NOT NULL DEFAULT '{}',  -- daily caps of day 1, 2, ... after start
    audience       text        NOT NULL DEFAULT '',    -- where the recipients came from
    recipients     bigint      NOT NULL DEFAULT 0,     -- valid, distinct recipients imported
    invalid_lines  bigint      NOT NULL DEFAULT 0,     -- lines skipped at import
    -- Pacer checkpoint: every recipient with ordinal <= checkpoint has been handled (row
    -- created, or suppressed); advanced only by the transaction that wrote those rows.
    checkpoint     bigint      NOT NULL DEFAULT 0,
    processed      bigint      NOT NULL DEFAULT 0,
    created_rows   bigint      NOT NULL DEFAULT 0,
    suppressed     bigint      NOT NULL DEFAULT 0,
    tokens         double precision NOT NULL DEFAULT 0,
    last_tick_at   timestamptz NULL,
    day            date        NULL,  -- the UTC day day_count counts
    day_count      bigint      NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT now(),
    started_at     timestamptz NULL,
    ended_at       timestamptz NULL,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS campaigns_running_idx ON campaigns (id) WHERE state = 'running';

CREATE TABLE IF NOT EXISTS campaign_recipients (
    campaign_id  bigint  NOT NULL,  -- campaigns.id (no FK: a per-row check would slow COPY)
    ordinal      bigint  NOT NULL,  -- the CSV line number: the pacer's order and checkpoint
    user_id      text    NOT NULL,
    email        text    NOT NULL,
    variables    jsonb   NOT NULL DEFAULT '{}',
    suppressed   boolean NOT NULL DEFAULT false,  -- found in email_suppressions at fan-out
    PRIMARY KEY (campaign_id, ordinal)
);

ALTER TABLE email_sends ADD COLUMN IF NOT EXISTS campaign_id bigint NULL;
CREATE INDEX IF NOT EXISTS email_sends_campaign_idx ON email_sends (campaign_id, status)
    WHERE campaign_id IS NOT NULL;

-- Suppressions are compared case-insensitively: lower() on both sides, served by the
-- index of 0009 (email_suppressions_lower_address_idx).
