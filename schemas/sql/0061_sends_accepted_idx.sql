-- mailbus: online
-- The reputation guard's count of accepted mail in its window, per provider and campaign
-- (campaigns/reputation.sql): an index-only scan of the window's mail, never the table.
-- Built with CREATE INDEX CONCURRENTLY, so enqueues go on while it builds
-- (docs/runbook.md#upgrades).
CREATE INDEX CONCURRENTLY IF NOT EXISTS email_sends_accepted_idx
    ON email_sends (accepted_at) INCLUDE (provider, campaign_id)
    WHERE accepted_at IS NOT NULL;
