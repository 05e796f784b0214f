-- A synchronous "no such address" (SMTP 550 5.1.1, a provider's "invalid recipient")
-- suppresses the address in the consumer's own settle statement (docs/providers.md#a-bad-address-is-suppressed).
-- The consumer's group role needs to insert a suppression, and to widen a bulk-only one,
-- before a consumer of this build runs: granted here too (when the role exists), so an
-- upgrade that runs `mailbus migrate` without `--roles` cannot leave every settle refused.
-- schemas/sql/roles/grants.sql carries the same grant for `mailbus migrate --roles`.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_consumer') THEN
        GRANT INSERT (address, reason, source), UPDATE (reason, source)
            ON email_suppressions TO mailbus_consumer;
    END IF;
END $$;
