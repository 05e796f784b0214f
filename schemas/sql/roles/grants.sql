-- `mailbus migrate --roles`: one NOLOGIN group role per kind of process, each with only
-- the grants its statements need. Give a login role membership in a group (for example
-- CREATE ROLE relay_1 LOGIN PASSWORD '...' IN ROLE mailbus_relay). Roles belong to the
-- cluster, grants to this database: run it once per database, again after each upgrade
-- (it first revokes what it grants, so a grant removed here is removed there too).
-- Run it as the owner of the tables (the role that ran `mailbus migrate`), which needs
-- CREATEROLE for the first run. Every grant is in mailbus's schema, the session's
-- current_schema() (`migrate --roles` sets search_path to MAILBUS_DB_SCHEMA, so the names
-- below are its objects); none is on anything in public or any other schema.

DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['mailbus_enqueuer', 'mailbus_relay', 'mailbus_consumer',
                                'mailbus_intake', 'mailbus_webhooks', 'mailbus_operator',
                                'mailbus_retention', 'mailbus_console'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = name) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', name);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created meanwhile by a run against another database
            END;
        END IF;
    END LOOP;
END $$;

DO $$
DECLARE
    roles text := 'mailbus_enqueuer, mailbus_relay, mailbus_consumer, mailbus_intake,'
                  ' mailbus_webhooks, mailbus_operator, mailbus_retention, mailbus_console';
    place text;
    col record;
BEGIN  -- revoked in the schema, and in public: what releases before 0072 granted there
    FOREACH place IN ARRAY ARRAY[current_schema(), 'public'] LOOP
        EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM %s', place, roles);
        -- the functions of migration 0053 and later are granted below
        EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM %s', place, roles);
    END LOOP;
    FOR col IN SELECT n.nspname AS place, c.relname AS tab, a.attname AS name,
                      r.rolname AS who
               FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace
               CROSS JOIN LATERAL aclexplode(a.attacl) acl
               JOIN pg_roles r ON r.oid = acl.grantee
               WHERE n.nspname IN (current_schema(), 'public') AND a.attacl IS NOT NULL
                 AND r.rolname LIKE 'mailbus\_%' LOOP  -- survive a table-level REVOKE ALL
        EXECUTE format('REVOKE ALL (%I) ON %I.%I FROM %I', col.name, col.place, col.tab,
                       col.who);
    END LOOP;
    EXECUTE format('REVOKE ALL ON SCHEMA public FROM %s', roles);
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %s', current_schema(), roles);
END $$;
-- PostgreSQL grants EXECUTE on a new function to PUBLIC, and attaching a trigger function
-- to a table of one's own (a temporary one will do) needs only that: any role with USAGE
-- on the schema could have the outcome-event trigger (SECURITY DEFINER) write the events of
-- a send it names. A trigger fires whatever its writer's rights, so nothing of mailbus's
-- needs it; an extension's functions (pg_trgm's, on a fresh install) keep theirs.
DO $$
DECLARE
    fn regprocedure;
BEGIN
    FOR fn IN SELECT p.oid FROM pg_proc p
              WHERE p.pronamespace = current_schema()::regnamespace
                AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                                AND d.objid = p.oid AND d.deptype = 'e') LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', fn);
    END LOOP;
END $$;
-- Role settings are not inherited from a group: each login of a process role gets the
-- schema's search_path in this database, so one that cannot pass startup options (through
-- PgBouncer) finds its tables. Not the enqueuer's logins: they are the application's, with
-- a path of its own (mailbus_client names the schema). A login added later: run this again
-- (docs/installation.md#the-database).
DO $$
DECLARE
    login text;
BEGIN
    FOR login IN SELECT DISTINCT m.rolname FROM pg_auth_members am
                 JOIN pg_roles g ON g.oid = am.roleid JOIN pg_roles m ON m.oid = am.member
                 WHERE g.rolname IN ('mailbus_relay', 'mailbus_consumer', 'mailbus_intake',
                                     'mailbus_webhooks', 'mailbus_operator',
                                     'mailbus_retention', 'mailbus_console')
                   AND m.rolcanlogin AND NOT m.rolsuper
                   AND NOT pg_has_role(m.oid, 'mailbus_enqueuer', 'MEMBER')
                   AND NOT EXISTS (  -- set already: no write, so no race with a DROP ROLE
                       SELECT FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
                       WHERE s.setrole = m.oid AND d.datname = current_database()
                         AND format('search_path=%I, public', current_schema()) = ANY (s.setconfig))
                 LOOP
        BEGIN
            EXECUTE format('ALTER ROLE %I IN DATABASE %I SET search_path = %I, public', login,
                           current_database(), current_schema());
        EXCEPTION WHEN undefined_object OR internal_error THEN
            NULL;  -- dropped meanwhile ("tuple concurrently deleted"): it needs no setting
        END;
    END LOOP;
END $$;
-- Every process compares the recorded schema versions with its build at start.
GRANT SELECT ON mailbus_schema_migrations TO mailbus_relay, mailbus_consumer, mailbus_intake,
    mailbus_webhooks, mailbus_retention, mailbus_console;

-- A domain service enqueuing in its own transaction (mailbus_client): insert a send, maybe
-- scheduled (next_try_at); read back the id of a duplicate, count open rows for the queue
-- cap, read a send's status; cancel a pending one through mailbus_cancel_send (0056). It
-- cannot read addresses, payloads or errors, change or delete a send otherwise, or see any
-- other table. It may give the row its W3C trace context (docs/guides/tracing.md).
GRANT INSERT (dedupe_key, to_address, template, payload_json, priority, expires_at,
              next_try_at, traceparent, tracestate)
    ON email_sends TO mailbus_enqueuer;
GRANT SELECT (id, dedupe_key, status, delivery_status, attempts, message_id, next_try_at,
              expires_at, created_at, updated_at) ON email_sends TO mailbus_enqueuer;
REVOKE ALL ON FUNCTION mailbus_cancel_send(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailbus_cancel_send(text, text) TO mailbus_enqueuer,
    mailbus_operator;

-- `mailbus relay` (relay/queries.sql): claims committed rows and dead letters and marks
-- them published, reading what a pointer carries (never an address or a payload, never
-- changing anything but published_at); its campaign pacer (campaigns/queries.sql
-- lock_running, fan_out, record_tick) fans recipients out into sends, skipping and marking
-- suppressed addresses, and advances the campaign's progress.
GRANT SELECT (id, dedupe_key, priority, status, attempts, next_try_at, created_at,
              published_at, campaign_id, traceparent, tracestate, template, first_tried_at),
      UPDATE (published_at)
    ON email_sends TO mailbus_relay;
GRANT INSERT (dedupe_key, to_address, template, payload_json, priority, campaign_id,
              expires_at)
    ON email_sends TO mailbus_relay;
GRANT SELECT, UPDATE (published_at) ON email_dead_letters TO mailbus_relay;
GRANT SELECT, UPDATE (checkpoint, processed, created_rows, suppressed, tokens, last_tick_at,
                      day, day_count, state, ended_at, updated_at)
    ON campaigns TO mailbus_relay;
-- ... and its reputation guard (campaigns/reputation.sql) reads the window's accepted mail
-- and its hard bounces and complaints, and pauses a campaign as `campaign pause` does
-- (campaigns/queries.sql transition, then hold_queued), with its reason.
GRANT SELECT (message_id, provider, accepted_at) ON email_sends TO mailbus_relay;
GRANT SELECT (type, bounce, message_id, matched, received_at) ON delivery_events
    TO mailbus_relay;
GRANT UPDATE (started_at, importing, paused_reason, guarded_since) ON campaigns
    TO mailbus_relay;
GRANT EXECUTE ON FUNCTION mailbus_campaign_hold(bigint) TO mailbus_relay;
GRANT SELECT, UPDATE (suppressed) ON campaign_recipients TO mailbus_relay;
GRANT SELECT ON email_suppressions TO mailbus_relay;
-- ... and publishes outcome events (recorded by a trigger), pruning them after a day.
GRANT SELECT, UPDATE, DELETE ON email_send_events TO mailbus_relay;

-- `mailbus consume` (consumer/queries.sql): reads the mail it sends; claims, settles and
-- records attempts, changing only the delivery columns (never the address, payload,
-- template, priority, expiry, campaign or the webhooks' delivery status); dead-letters
-- what fails; shares rate limits and provider health with the other consumers.
GRANT SELECT, UPDATE (status, attempts, next_try_at, in_doubt_since, last_error, message_id,
                      provider_code, accepted_at, lease_token, lease_until, published_at,
                      provider, guarantee, first_tried_at, provider_key, provider_kind)
    ON email_sends TO mailbus_consumer;
GRANT SELECT ON email_suppressions TO mailbus_consumer;
-- ... and a synchronous "no such address" (SMTP 550 5.1.1) suppresses it, as a webhook
-- hard bounce does (widening an unsubscribe or complaint to all mail), never unsuppresses.
GRANT INSERT (address, reason, source), UPDATE (reason, source) ON email_suppressions
    TO mailbus_consumer;
GRANT SELECT, INSERT ON email_attempts, email_dead_letters TO mailbus_consumer;
GRANT SELECT, INSERT, UPDATE ON rate_limits, provider_health, recovery_pacing
    TO mailbus_consumer;
-- ... and its claim refuses the rows of a paused or cancelled campaign.
GRANT SELECT (id, state) ON campaigns TO mailbus_consumer;
-- ... and reads how many lives a dedupe key had before (docs/retention.md), to send a key
-- enqueued again after retention under a key of its own.
GRANT SELECT ON email_key_lives TO mailbus_consumer;

-- `mailbus intake`: inserts sends from domain events (an event older than
-- MAILBUS_INTAKE_MAX_AGE as an expired row, saying why), dead-letters the undecodable.
GRANT INSERT (dedupe_key, to_address, template, payload_json, priority, expires_at, status,
              last_error, traceparent, tracestate)
    ON email_sends TO mailbus_intake;
GRANT SELECT (id, dedupe_key, status) ON email_sends TO mailbus_intake;
GRANT INSERT (reason, error, original_topic, original_partition, original_offset,
              original_key, original_value, published_at)
    ON email_dead_letters TO mailbus_intake;
-- ... whose ON CONFLICT (original_topic, original_partition, original_offset) WHERE reason
-- IN (...) needs SELECT on the arbiter index's columns: without it every dead letter is
-- "permission denied" and the batch behind it never commits.
GRANT SELECT (original_topic, original_partition, original_offset, reason)
    ON email_dead_letters TO mailbus_intake;

-- `mailbus webhooks` (feedback/events.sql, unsubscribe.sql), facing the internet: records
-- delivery events on their sends (found by message id: the latest event and its time, the
-- address to suppress), suppresses bounced and complaining addresses, takes unsubscribes.
-- It cannot read a payload or change what a send is (its key, address, template, payload).
-- It reads a send's trace context, to put the event in the send's trace (0066).
GRANT SELECT, INSERT (provider, event_id, type, bounce, message_id, occurred_at, matched,
                      reason, suppression, provider_key),
      UPDATE (matched)
    ON delivery_events TO mailbus_webhooks;
GRANT SELECT (id, message_id, to_address, delivery_status, last_event_at, provider, status,
              dedupe_key, provider_key, attempts, traceparent, tracestate),
      UPDATE (delivery_status, last_event_at)
    ON email_sends TO mailbus_webhooks;
-- ... and settles an `unknown` send (or a `pending` one after a call) of a provider with
-- neither key nor look-up from that provider's own event carrying the send's key
-- (settle_from_events: accepted, with the event's message id, as `mailbus send resolve
-- --accepted` would) through mailbus_settle_from_events (migration 0069), the only move on
-- a send's status it may make.
REVOKE ALL ON FUNCTION mailbus_settle_from_events(jsonb, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mailbus_settle_from_events(jsonb, jsonb) TO mailbus_webhooks;
GRANT SELECT, INSERT ON email_suppressions TO mailbus_webhooks;
-- ... and widens an unsubscribe's or a complaint's entry to all mail after a hard bounce.
GRANT UPDATE (reason, source) ON email_suppressions TO mailbus_webhooks;
-- ... and remembers Mailgun's signature tokens for the tolerance window, pruning them.
GRANT SELECT, INSERT, UPDATE, DELETE ON webhook_tokens TO mailbus_webhooks;

-- People: `mailbus status`, `dlq`, `send`, `suppress`, `campaign`. Reads everything;
-- replays dead letters (consumer/dead_letters.sql: the letter's replayed_at and send_id),
-- resolves and cancels sends (consumer/send_admin.sql), manages suppressions and campaigns,
-- and paces one in the foreground (`campaign run`: the relay's pacer, which inserts sends
-- and marks suppressed recipients). It changes a send's state, never what the send is (key,
-- address, template, payload, priority, campaign, trace context, creation time) nor the
-- webhooks' delivery status; never deletes a send or its history, and (owning nothing)
-- cannot change the schema.
DO $$
BEGIN
    EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO mailbus_operator',
                   current_schema());
END $$;
GRANT UPDATE (status, attempts, next_try_at, expires_at, message_id, last_error, updated_at,
              published_at, lease_until, accepted_at, lease_token, provider, in_doubt_since,
              provider_code, guarantee, first_tried_at, provider_kind)
    ON email_sends TO mailbus_operator;
GRANT UPDATE (replayed_at, send_id) ON email_dead_letters TO mailbus_operator;
GRANT INSERT ON email_replays TO mailbus_operator;
GRANT INSERT ON email_send_resolutions TO mailbus_operator;
GRANT INSERT, UPDATE, DELETE ON email_suppressions TO mailbus_operator;
GRANT INSERT, UPDATE ON campaigns TO mailbus_operator;
GRANT INSERT, UPDATE, DELETE ON campaign_recipients TO mailbus_operator;
GRANT INSERT ON email_sends TO mailbus_operator;

-- `mailbus retention run` (docs/retention.md): deletes only through mailbus_prune
-- (migration 0057), a SECURITY DEFINER function that deletes what the *_past_retention
-- views name under a window of at least its table's floor, nothing else: no DELETE grant
-- of its own, so its login cannot delete a pending send. `--dry-run` counts the views
-- (keys and times only). It reads no other table, inserts and updates nothing.
GRANT SELECT ON email_sends_past_retention, email_dead_letters_past_retention,
    delivery_events_past_retention TO mailbus_retention;
GRANT EXECUTE ON FUNCTION mailbus_prune(text, double precision, integer) TO mailbus_retention;
-- Campaigns, their recipients and the console audit through mailbus_prune_history, the
-- backlog counted through migration 0062's functions (same rules). Each function refuses a
-- window under its table's floor (retention_floors, migration 0064), which this role reads
-- and only the operator changes (`mailbus retention floors --set`); each run is recorded
-- by mailbus_retention_report from the database's own figures, never the caller's.
GRANT EXECUTE ON FUNCTION mailbus_prune_history(text, double precision, integer),
    mailbus_retention_backlog(text, double precision, bigint),
    mailbus_retention_report() TO mailbus_retention;
GRANT SELECT ON retention_floors TO mailbus_retention;
GRANT SELECT, UPDATE (floor_s) ON retention_floors TO mailbus_operator;
GRANT SELECT ON retention_runs TO mailbus_relay;

-- `mailbus console` (docs/guides/console.md#its-database-role): what its pages show and its
-- actions do, nothing more. It reads every column of a send but the payload and the lease
-- token (a mail's page shows its variables' names through the email_sends_shown view),
-- and updates no send itself: a dead letter's replay (failed -> pending) and a campaign's
-- pause, resume and cancel go through migration 0053's functions, each checking that its
-- move happens in the same transaction. It reads no
-- dead letter's stored Kafka key or value and no recipient's address or variables (it
-- imports them). Its audit rows are append-only: it inserts them, the database stamps the
-- time and the login (migration 0052), and nobody updates them. It deletes no send.
GRANT SELECT (id, dedupe_key, to_address, template, priority, status, attempts, next_try_at,
              expires_at, message_id, last_error, created_at, updated_at, published_at,
              lease_until, accepted_at, provider, in_doubt_since, delivery_status,
              last_event_at, campaign_id, provider_code, guarantee, first_tried_at, provider_key)
    ON email_sends TO mailbus_console;
GRANT EXECUTE ON FUNCTION mailbus_replay_send(bigint), mailbus_campaign_lock_open(bigint),
    mailbus_campaign_expire_unsent(bigint), mailbus_campaign_expire_in_doubt(bigint),
    mailbus_campaign_hold(bigint), mailbus_campaign_release(bigint)
    TO mailbus_console, mailbus_operator;
GRANT SELECT ON email_sends_shown TO mailbus_console, mailbus_operator;
GRANT SELECT ON email_key_lives TO mailbus_console;  -- a deleted key's lives (send show)
GRANT SELECT (id, send_id, dedupe_key, priority, template, reason, status_code, error, attempts,
              original_topic, original_partition, original_offset, created_at, published_at,
              replayed_at), UPDATE (replayed_at)
    ON email_dead_letters TO mailbus_console;
GRANT SELECT, INSERT ON email_replays TO mailbus_console;
GRANT SELECT ON email_attempts, email_send_resolutions, delivery_events, provider_health
    TO mailbus_console;
GRANT SELECT (id, published_at) ON email_send_events TO mailbus_console;
GRANT SELECT, INSERT, UPDATE, DELETE ON email_suppressions TO mailbus_console;
-- Of a campaign it inserts a draft and writes only what its import counts and its moves
-- change (campaigns/queries.sql: insert_campaign, record_part, finish_import, transition;
-- migration 0063): never a rate, cap, window, template, audience or checkpoint.
GRANT SELECT,
      INSERT (name, template, priority, rate_per_min, window_start, window_end, daily_cap,
              warmup, audience, importing),
      UPDATE (recipients, invalid_lines, imported_through, imported_key, processed,
              suppressed, importing, state, started_at, ended_at, tokens, last_tick_at,
              paused_reason, guarded_since, updated_at)
    ON campaigns TO mailbus_console;
GRANT SELECT (campaign_id, ordinal, user_id, suppressed),
      INSERT (campaign_id, ordinal, user_id, email, variables), DELETE
    ON campaign_recipients TO mailbus_console;
GRANT SELECT, INSERT (who, role, action, target, mails, detail) ON console_audit
    TO mailbus_console;
