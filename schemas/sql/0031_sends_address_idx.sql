-- mailbus: online
-- The console finds a mail by its address (case-insensitively, as everywhere). Built with
-- CREATE INDEX CONCURRENTLY, so enqueues go on while it builds (docs/runbook.md#upgrades).
CREATE INDEX CONCURRENTLY IF NOT EXISTS email_sends_lower_to_address_idx
    ON email_sends (lower(to_address));
