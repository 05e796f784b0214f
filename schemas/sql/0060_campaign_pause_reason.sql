-- The reputation guard (docs/guides/campaigns.md#the-reputation-guard): why a campaign is
-- paused, and from when its rates count. Adding NULL columns without a default changes
-- only the catalogue: the brief ACCESS EXCLUSIVE lock on campaigns never rewrites it.
-- paused_reason: NULL for an operator's pause, the guard's reason for its own;
-- guarded_since: its last start or resume, so a resumed campaign is judged by what it
-- sent since.
ALTER TABLE campaigns
    ADD COLUMN IF NOT EXISTS paused_reason text NULL,
    ADD COLUMN IF NOT EXISTS guarded_since timestamptz NULL;
