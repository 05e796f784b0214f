-- mailbus: online
-- The console's pages at any size (docs/guides/console.md#the-overview-at-any-size). Each
-- statement runs alone, outside a transaction; every index is built with CREATE INDEX
-- CONCURRENTLY, so enqueues go on while it builds (docs/runbook.md#upgrades).

-- Dead letters not replayed, by reason: the overview's count and the dead-letter list read
-- only these (a few), never the replayed ones (nearly all).
CREATE INDEX CONCURRENTLY IF NOT EXISTS email_dead_letters_open_idx
    ON email_dead_letters (reason) WHERE replayed_at IS NULL;

-- One campaign's bounced and complained mails: only those mails, not all of its mail.
CREATE INDEX CONCURRENTLY IF NOT EXISTS email_sends_campaign_feedback_idx
    ON email_sends (campaign_id, delivery_status)
    WHERE delivery_status IN ('bounced', 'complained');

-- The addresses unsubscribed through one campaign's links (source 'campaign:N').
CREATE INDEX CONCURRENTLY IF NOT EXISTS email_suppressions_unsubscribed_idx
    ON email_suppressions (source) WHERE reason = 'unsubscribed';

-- The suppression search (a part of an address, any case): trigrams. pg_trgm is a trusted
-- extension: the database's owner (who runs `mailbus migrate`) may create it.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX CONCURRENTLY IF NOT EXISTS email_suppressions_address_trgm_idx
    ON email_suppressions USING gin (address gin_trgm_ops);
