-- The console's role writes only the columns of `campaigns` its statements write
-- (docs/guides/console.md#its-database-role; issue 35): it had INSERT and UPDATE on every
-- column, so a console taken over could raise a running campaign's rate, lift its daily
-- cap or window, change its template or audience, move its checkpoint past recipients
-- never handed out, or insert a campaign already running. Its statements
-- (campaigns/queries.sql): insert_campaign inserts a draft; record_part and finish_import
-- count the import; transition moves the state. The same grants are in
-- schemas/sql/roles/grants.sql (`mailbus migrate --roles`); here they are applied when the
-- role exists, for a database upgraded by a plain `mailbus migrate`.
--
-- GRANT and REVOKE change only the catalog's entry for campaigns: no lock on its rows.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_console') THEN
        REVOKE INSERT, UPDATE ON campaigns FROM mailbus_console;
        GRANT INSERT (name, template, priority, rate_per_min, window_start, window_end,
                      daily_cap, warmup, audience, importing),
              UPDATE (recipients, invalid_lines, imported_through, imported_key, processed,
                      suppressed, importing, state, started_at, ended_at, tokens,
                      last_tick_at, paused_reason, guarded_since, updated_at)
            ON campaigns TO mailbus_console;
    END IF;
END $$;
