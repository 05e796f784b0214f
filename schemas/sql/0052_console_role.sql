-- The console's own database role, mailbus_console (docs/guides/console.md#its-database-role;
-- its grants: schemas/sql/roles/grants.sql). Two things it needs from the schema:
--
-- 1. console_audit is append-only and says which database login wrote each row: db_user is
--    set by the trigger below from session_user (the login, not the group), whatever the
--    INSERT says, and no row is ever updated. Rows written before this migration have no
--    db_user. A failed sign-in is written with role 'none' (nobody signed in).
-- 2. email_sends_shown: a send as the console shows it, without its payload (the mail's
--    variables are secrets: reset links, tokens) but with the variables' names, and
--    without its lease token. A view runs with its owner's rights, so the console reads
--    it without any right on payload_json.
--
-- console_audit is small and only the console writes it: its brief ACCESS EXCLUSIVE lock
-- holds no mail up. The view reads email_sends' catalog entry only.
ALTER TABLE console_audit ADD COLUMN IF NOT EXISTS db_user text;
ALTER TABLE console_audit DROP CONSTRAINT IF EXISTS console_audit_role_check;
ALTER TABLE console_audit ADD CONSTRAINT console_audit_role_check
    CHECK (role IN ('viewer', 'operator', 'none')) NOT VALID;
-- Left NOT VALID: every earlier row (viewer, operator) meets the wider check, and
-- validating would read the table under the lock just taken.

CREATE OR REPLACE FUNCTION console_audit_append_only() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'console_audit is append-only' USING ERRCODE = 'insufficient_privilege';
    END IF;
    NEW.db_user := session_user;
    NEW.at := now();
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS console_audit_append_only ON console_audit;
CREATE TRIGGER console_audit_append_only BEFORE INSERT OR UPDATE ON console_audit
    FOR EACH ROW EXECUTE FUNCTION console_audit_append_only();

CREATE OR REPLACE VIEW email_sends_shown AS
SELECT id, dedupe_key, to_address, template, priority, status, attempts, next_try_at,
       expires_at, message_id, last_error, created_at, updated_at, published_at,
       lease_until, accepted_at, provider, in_doubt_since, delivery_status, last_event_at,
       campaign_id, provider_code, guarantee, first_tried_at, traceparent, tracestate,
       provider_key,
       coalesce((SELECT k.lives + 1 FROM email_key_lives k WHERE k.dedupe_key = s.dedupe_key),
                1) AS key_life,
       CASE WHEN jsonb_typeof(payload_json) = 'object'
            THEN ARRAY(SELECT jsonb_object_keys(payload_json) ORDER BY 1)
            ELSE '{}'::text[] END AS variables
FROM email_sends s;

-- Granted here too when the roles exist (a plain `mailbus migrate`); grants.sql carries
-- the same grants and is what `mailbus migrate --roles` applies.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_operator') THEN
        GRANT SELECT ON email_sends_shown TO mailbus_operator;
        REVOKE INSERT ON console_audit FROM mailbus_operator;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_console') THEN
        GRANT SELECT ON email_sends_shown TO mailbus_console;
        GRANT SELECT, INSERT (who, role, action, target, mails, detail) ON console_audit
            TO mailbus_console;
    END IF;
END $$;
