-- The provider's own reply code, as text, per attempt and on the row (its latest): the HTTP
-- status ('503') or the SMTP reply code with its enhanced status code ('550 5.1.1').
ALTER TABLE email_sends ADD COLUMN IF NOT EXISTS provider_code text NULL;
ALTER TABLE email_attempts ADD COLUMN IF NOT EXISTS provider_code text NULL;
