-- Which provider took the row's latest call: NULL for the primary, 'fallback' for the
-- second provider a `fallback` policy may use while the primary's breaker is open. A look-up
-- that resolves an unknown outcome must ask the provider that was called.
ALTER TABLE email_sends ADD COLUMN provider text NULL;
