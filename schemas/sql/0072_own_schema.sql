-- mailbus in a schema of its own (MAILBUS_DB_SCHEMA, default mailbus; issue 36): an install
-- from before it, whose objects are in public, is moved there. `mailbus migrate` runs this
-- file with the session's search_path set to the schema (it created it), so
-- current_schema() is where everything goes; the older migrations of such an install ran
-- in public, as they always did (mailbus/app/migrate.py). A fresh install has nothing in
-- public: nothing moves. The objects are named here, never found by a pattern: a table of
-- the application's in public stays where it is (tests/integration/test_db_schema.py
-- checks that this list is what a fresh install creates). A table brings its indexes,
-- constraints, triggers, owned sequences and grants; the functions are pinned to the
-- schema by the run once this file is applied. The pg_trgm extension stays in public:
-- its operator class keeps serving the suppressions' index from there, and the
-- application may use it too (docs/installation.md#the-database).
-- Lock level: SET SCHEMA changes the catalogue only, under each table's ACCESS EXCLUSIVE
-- lock for an instant, taken with migrate's lock timeout (its retries: the whole file).
DO $$
DECLARE
    target text := current_schema();
    name text;
BEGIN
    IF target = 'public' OR to_regclass('public.mailbus_schema_migrations') IS NULL THEN
        RETURN;
    END IF;
    FOREACH name IN ARRAY ARRAY[
        'email_sends', 'email_suppressions', 'email_dead_letters', 'email_attempts',
        'email_replays', 'rate_limits', 'provider_health', 'delivery_events', 'campaigns',
        'campaign_recipients', 'recovery_pacing', 'email_send_events',
        'email_send_resolutions', 'console_audit', 'email_key_lives', 'webhook_tokens',
        'retention_runs', 'retention_floors', 'retention_progress',
        'mailbus_schema_migrations'] LOOP
        IF to_regclass(format('public.%I', name)) IS NOT NULL THEN
            EXECUTE format('ALTER TABLE public.%I SET SCHEMA %I', name, target);
        END IF;
    END LOOP;
    FOREACH name IN ARRAY ARRAY[
        'email_sends_past_retention', 'email_dead_letters_past_retention',
        'delivery_events_past_retention', 'email_sends_shown'] LOOP
        IF to_regclass(format('public.%I', name)) IS NOT NULL THEN
            EXECUTE format('ALTER VIEW public.%I SET SCHEMA %I', name, target);
        END IF;
    END LOOP;
    FOREACH name IN ARRAY ARRAY[
        'mailbus_touch_updated_at()', 'mailbus_notify_outbox_if_rows()',
        'mailbus_record_send_event()', 'mailbus_count_key_lives()',
        'console_audit_append_only()', 'mailbus_replay_send(bigint)',
        'mailbus_campaign_lock_open(bigint)', 'mailbus_campaign_expire_unsent(bigint)',
        'mailbus_campaign_expire_in_doubt(bigint)', 'mailbus_campaign_hold(bigint)',
        'mailbus_campaign_release(bigint)', 'mailbus_cancel_send(text,text)',
        'mailbus_prune(text,double precision,integer)',
        'mailbus_prune_history(text,double precision,integer)',
        'mailbus_retention_backlog(text,double precision,bigint)',
        'mailbus_retention_check(text,text[],text,double precision,integer)',
        'mailbus_retention_record(text,double precision,integer,bigint)',
        'mailbus_retention_report()', 'mailbus_settle_from_events(jsonb,jsonb)',
        'mailbus_suppression_kept()', 'mailbus_audit_row_stamped()',
        'mailbus_campaign_times_stamped()'] LOOP
        IF to_regprocedure('public.' || name) IS NOT NULL THEN
            EXECUTE format('ALTER FUNCTION public.%s SET SCHEMA %I', name, target);
        END IF;
    END LOOP;
END $$;
