-- mailbus: locking (a stored generated column rewrites email_suppressions under ACCESS EXCLUSIVE)
-- Suppressions scoped by their reason (issue 18). A hard bounce, a manual entry or any
-- other reason stops all mail to the address (scope 'all'); a complaint or an unsubscribe
-- stops bulk mail only (scope 'bulk': a campaign's rows and the templates of the policy
-- named 'bulk'), never a password reset, a code or an order. The scope is derived from the
-- reason here, in one place, so every writer (webhooks, unsubscribe links, `suppress add`,
-- `suppress import`) and every existing row follow the same rule; a reason changed later
-- changes the scope with it.
ALTER TABLE email_suppressions ADD COLUMN IF NOT EXISTS scope text
    GENERATED ALWAYS AS (
        CASE WHEN reason IN ('complaint', 'unsubscribed') THEN 'bulk' ELSE 'all' END
    ) STORED;
