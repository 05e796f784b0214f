-- Retention's windows, a fact of the database (docs/retention.md#floors,
-- docs/guides/security.md#least-privilege). Until now only `mailbus retention run` kept to
-- MAILBUS_RETENTION and its siblings; its SECURITY DEFINER functions took any window of a
-- day or more, and it wrote its own run report. A leaked mailbus_retention login could
-- delete a two-day-old send while its intake event may still be read again (sent twice),
-- erase a year of console audit, and then report itself caught up, the alerts quiet.
--
-- retention_floors: one row per table retention prunes, its window in seconds. Written
-- only by the tables' owner and mailbus_operator (`mailbus retention floors --set` pins
-- them to the configured windows); mailbus_retention reads them and cannot change them.
-- The defaults are the default windows. mailbus_prune and mailbus_prune_history refuse a
-- window under the table's floor.
--
-- retention_progress: what the pruning functions did since the last report, written by
-- them alone: rows deleted, and whether the table's last batch was a short one under its
-- floor (nothing left past it), and when. mailbus_retention_report() takes no figures: a
-- run is complete when every table was so caught up since the previous report, and what
-- is left is counted under the floors. A window longer than the floor deletes less and
-- never counts as caught up.
--
-- Applied after 0069 on a database already there (migrate applies each missing version):
-- nothing here depends on 0065-0069, which do not touch these functions.
-- Lock level: CREATE TABLE/FUNCTION, GRANT and REVOKE take no lock on an existing table;
-- writers never wait.
CREATE TABLE IF NOT EXISTS retention_floors (
    what    text PRIMARY KEY,
    floor_s double precision NOT NULL CHECK (floor_s >= 86400 AND floor_s < 'Infinity')
);
INSERT INTO retention_floors (what, floor_s) VALUES
    ('sends', 90 * 86400), ('dead letters', 90 * 86400), ('delivery events', 90 * 86400),
    ('campaign recipients', 30 * 86400), ('campaigns', 365 * 86400),
    ('console audit', 365 * 86400)
ON CONFLICT (what) DO NOTHING;

CREATE TABLE IF NOT EXISTS retention_progress (
    what         text PRIMARY KEY REFERENCES retention_floors,
    deleted      bigint NOT NULL DEFAULT 0,
    caught_up_at timestamptz
);
INSERT INTO retention_progress (what) SELECT what FROM retention_floors
ON CONFLICT (what) DO NOTHING;

-- The checks both pruning functions make before a batch: `what` one of the tables `fn`
-- prunes, a window of the table's floor or more (NaN sorts above Infinity: refused too), a
-- positive batch.
CREATE OR REPLACE FUNCTION mailbus_retention_check(fn text, tables text[], what text,
                                                   window_s double precision, batch integer)
    RETURNS void
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    least_s double precision;
BEGIN
    SELECT floor_s INTO least_s FROM retention_floors f
        WHERE f.what = mailbus_retention_check.what AND f.what = ANY(tables);
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: nothing called %', fn, what USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF window_s IS NULL OR NOT (window_s >= least_s AND window_s < 'Infinity') THEN
        RAISE EXCEPTION '%: the window for % must be at least its floor, % s; got % s', fn,
            what, least_s, window_s
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'the operator sets the floors: `mailbus retention floors --set`';
    END IF;
    IF batch IS NULL OR batch < 1 THEN
        RAISE EXCEPTION '%: batch must be positive, got %', fn, batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END $$;

-- ... and after it: count the rows; the table is caught up after a short batch under the
-- floor itself, and no longer after any other (a full one may have left more).
CREATE OR REPLACE FUNCTION mailbus_retention_record(what text, window_s double precision,
                                                    batch integer, deleted bigint)
    RETURNS bigint
    LANGUAGE sql SET search_path FROM CURRENT AS $$
    UPDATE retention_progress p
    SET deleted = p.deleted + mailbus_retention_record.deleted,
        caught_up_at = CASE WHEN mailbus_retention_record.deleted < batch
                                 AND window_s <= f.floor_s
                            THEN now() END
    FROM retention_floors f
    WHERE p.what = mailbus_retention_record.what AND f.what = p.what;
    SELECT mailbus_retention_record.deleted;
$$;

-- mailbus_prune (0057) and mailbus_prune_history (0062) as they were, their checks and
-- their record in the two functions above.
CREATE OR REPLACE FUNCTION mailbus_prune(what text, retention_s double precision,
                                         batch integer) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    deleted bigint;
BEGIN
    PERFORM mailbus_retention_check('mailbus_prune',
        ARRAY['sends', 'dead letters', 'delivery events'], what, retention_s, batch);
    PERFORM set_config('mailbus.retention_s', retention_s::text, true);
    IF what = 'sends' THEN
        WITH doomed AS (
            SELECT id FROM email_sends_past_retention
            ORDER BY updated_at LIMIT batch
            FOR UPDATE SKIP LOCKED
        ), letters AS (
            SELECT d.id FROM email_dead_letters d JOIN doomed ON d.send_id = doomed.id
        ), replays_gone AS (
            DELETE FROM email_replays r USING letters WHERE r.dead_letter_id = letters.id
        ), letters_gone AS (
            DELETE FROM email_dead_letters d USING letters WHERE d.id = letters.id
        )
        DELETE FROM email_sends s USING doomed WHERE s.id = doomed.id;
    ELSIF what = 'dead letters' THEN
        WITH doomed AS (
            SELECT id FROM email_dead_letters_past_retention
            ORDER BY created_at LIMIT batch
            FOR UPDATE SKIP LOCKED
        ), replays_gone AS (
            DELETE FROM email_replays r USING doomed WHERE r.dead_letter_id = doomed.id
        )
        DELETE FROM email_dead_letters d USING doomed WHERE d.id = doomed.id;
    ELSE
        WITH doomed AS (
            SELECT provider, event_id FROM delivery_events_past_retention
            ORDER BY received_at LIMIT batch
            FOR UPDATE SKIP LOCKED
        )
        DELETE FROM delivery_events e USING doomed
        WHERE e.provider = doomed.provider AND e.event_id = doomed.event_id;
    END IF;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN mailbus_retention_record(what, retention_s, batch, deleted);
END $$;

CREATE OR REPLACE FUNCTION mailbus_prune_history(what text, window_s double precision,
                                                 batch integer) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    deleted bigint;
    cutoff timestamptz;
BEGIN
    PERFORM mailbus_retention_check('mailbus_prune_history',
        ARRAY['campaign recipients', 'campaigns', 'console audit'], what, window_s, batch);
    cutoff := now() - make_interval(secs => window_s);
    IF what = 'campaign recipients' THEN
        WITH doomed AS (
            SELECT r.campaign_id, r.ordinal FROM campaign_recipients r
            WHERE r.campaign_id IN (
                SELECT c.id FROM campaigns c WHERE c.state IN ('finished', 'cancelled')
                  AND coalesce(c.ended_at, c.updated_at) < cutoff)
            LIMIT batch FOR UPDATE OF r SKIP LOCKED
        )
        DELETE FROM campaign_recipients r USING doomed
        WHERE r.campaign_id = doomed.campaign_id AND r.ordinal = doomed.ordinal;
    ELSIF what = 'campaigns' THEN
        WITH doomed AS (
            SELECT c.id FROM campaigns c
            WHERE c.state IN ('finished', 'cancelled')
              AND coalesce(c.ended_at, c.updated_at) < cutoff
              AND NOT EXISTS (SELECT FROM campaign_recipients r WHERE r.campaign_id = c.id)
            ORDER BY c.id LIMIT batch FOR UPDATE SKIP LOCKED
        )
        DELETE FROM campaigns c USING doomed WHERE c.id = doomed.id;
    ELSE
        WITH doomed AS (
            SELECT id FROM console_audit WHERE at < cutoff
            ORDER BY at LIMIT batch FOR UPDATE SKIP LOCKED
        )
        DELETE FROM console_audit a USING doomed WHERE a.id = doomed.id;
    END IF;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN mailbus_retention_record(what, window_s, batch, deleted);
END $$;

-- The run's record in retention_runs (0062), from the database's own figures: complete
-- when every table was caught up since the previous report, the rows deleted since then,
-- and what is past the floors now (counted up to 10M rows per table, as the CLI's
-- BACKLOG_CAP), which it also returns by table for the run's output.
CREATE OR REPLACE FUNCTION mailbus_retention_report(OUT kind text, OUT left_rows bigint,
                                                    OUT left_s double precision)
    RETURNS SETOF record
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    previous timestamptz;
    all_caught_up boolean;
    total bigint;
    total_left bigint := 0;
    oldest_s double precision := 0;
BEGIN
    SELECT max(finished_at) INTO previous FROM retention_runs;
    SELECT bool_and(coalesce(caught_up_at > previous, caught_up_at IS NOT NULL)), sum(deleted)
        INTO all_caught_up, total FROM retention_progress;
    UPDATE retention_progress SET deleted = 0;
    FOR kind, left_rows, left_s IN
        SELECT f.what, b.backlog_rows, b.overdue_s FROM retention_floors f,
            LATERAL mailbus_retention_backlog(f.what, f.floor_s, 10000000) b
    LOOP
        total_left := total_left + left_rows;
        oldest_s := greatest(oldest_s, left_s);
        RETURN NEXT;
    END LOOP;
    DELETE FROM retention_runs WHERE finished_at < now() - interval '30 days';
    INSERT INTO retention_runs (complete, deleted, backlog_rows, overdue_s)
    VALUES (coalesce(all_caught_up, false), total, total_left, oldest_s);
END $$;

-- The report that took the caller's figures goes: an older build's run fails at its end.
DROP FUNCTION IF EXISTS mailbus_retention_report(boolean, bigint, bigint, double precision);

-- A function is executable by PUBLIC unless revoked: the two helpers are the definer
-- functions' alone (mailbus_retention_record would let anyone mark a table caught up).
REVOKE ALL ON FUNCTION mailbus_retention_check(text, text[], text, double precision, integer),
    mailbus_retention_record(text, double precision, integer, bigint),
    mailbus_retention_report() FROM PUBLIC;

-- Granted here too when the roles exist (a plain `mailbus migrate`); grants.sql carries
-- the same grants and is what `mailbus migrate --roles` applies.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_retention') THEN
        GRANT SELECT ON retention_floors TO mailbus_retention;
        GRANT EXECUTE ON FUNCTION mailbus_retention_report() TO mailbus_retention;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_operator') THEN
        GRANT SELECT, UPDATE (floor_s) ON retention_floors TO mailbus_operator;
        GRANT SELECT ON retention_progress TO mailbus_operator;  -- it reads every table
    END IF;
END $$;
