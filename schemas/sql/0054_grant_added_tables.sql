-- The tables and views added since the group roles exist, granted as
-- schemas/sql/roles/grants.sql grants them, to the roles that exist (issue 35, review
-- 2026-12-06 hole 10). Their own migrations did not: a database whose grants were last set
-- before them, upgraded by a plain `mailbus migrate` (the Kubernetes Job until now), denied
-- `send resolve` its audit row, the console its sign-in audit, the relay its outcome events
-- and the consumer its recovery pacing. From here on a migration that adds a table grants
-- it itself (tests/unit/test_migration_grants.py).
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_consumer') THEN
        GRANT SELECT, INSERT, UPDATE ON recovery_pacing TO mailbus_consumer;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_relay') THEN
        GRANT SELECT, UPDATE, DELETE ON email_send_events TO mailbus_relay;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_operator') THEN
        GRANT SELECT ON recovery_pacing, email_send_events, email_send_resolutions,
            console_audit, email_sends_past_retention, email_dead_letters_past_retention,
            delivery_events_past_retention TO mailbus_operator;
        GRANT INSERT ON email_send_resolutions TO mailbus_operator;  -- the audit: the console's (0052)
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_console') THEN  -- 0052's role
        GRANT SELECT (id, published_at) ON email_send_events TO mailbus_console;
        GRANT SELECT ON email_send_resolutions TO mailbus_console;
        GRANT SELECT, INSERT (who, role, action, target, mails, detail) ON console_audit
            TO mailbus_console;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_retention') THEN
        GRANT SELECT ON email_sends_past_retention, email_dead_letters_past_retention,
            delivery_events_past_retention TO mailbus_retention;  -- deletes: mailbus_prune (0057)
    END IF;
END $$;
