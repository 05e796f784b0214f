-- Retention that keeps up by itself (docs/retention.md): campaigns, their recipients
-- (addresses and variables) and the console's audit get windows of their own, and each
-- run of `mailbus retention run` records how far behind it is, which the relay exports
-- (mailbus_retention_backlog_rows, ops/alerts.yml reads it).
--
-- mailbus_prune_history: the sibling of mailbus_prune (0057) for those three tables, a
-- SECURITY DEFINER function with a pinned search_path, so mailbus_retention still holds no
-- DELETE grant. One batch of `what`, under a window of `window_s` seconds (at least a day):
--   'campaign recipients': recipients of a campaign ended (finished or cancelled, never
--       draft, running or paused) longer ago than the window; the campaign row stays;
--   'campaigns': a campaign ended longer ago than the window, once no recipient is left;
--   'console audit': audit rows older than the window.
-- FOR UPDATE SKIP LOCKED, as in mailbus_prune. Returns how many rows it deleted.
-- Lock level: CREATE TABLE/FUNCTION take no lock on an existing table; writers never wait.
CREATE OR REPLACE FUNCTION mailbus_prune_history(what text, window_s double precision,
                                                 batch integer) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    deleted bigint;
    cutoff timestamptz;
BEGIN
    IF window_s IS NULL OR NOT (window_s >= 86400 AND window_s < 'Infinity') THEN
        RAISE EXCEPTION 'mailbus_prune_history: the window must be at least a day, got % s',
            window_s USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF batch IS NULL OR batch < 1 THEN
        RAISE EXCEPTION 'mailbus_prune_history: batch must be positive, got %', batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
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
    ELSIF what = 'console audit' THEN
        WITH doomed AS (
            SELECT id FROM console_audit WHERE at < cutoff
            ORDER BY at LIMIT batch FOR UPDATE SKIP LOCKED
        )
        DELETE FROM console_audit a USING doomed WHERE a.id = doomed.id;
    ELSE
        RAISE EXCEPTION 'mailbus_prune_history: nothing called %', what
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END $$;

-- mailbus_retention_backlog: how many rows of `what` (any name of mailbus_prune or
-- mailbus_prune_history) are past the window now, counted up to `cap`, and how long the
-- oldest of them has been past it (seconds; 0 when none). `--dry-run` and the end of a
-- run read it; it reads keys and times only and returns two numbers. The oldest row is
-- found as mailbus_prune finds its batch (ORDER BY the time LIMIT 1: the settled index),
-- not by min() over the view, which would read every row past the window.
CREATE OR REPLACE FUNCTION mailbus_retention_backlog(what text, window_s double precision,
                                                     cap bigint,
                                                     OUT backlog_rows bigint,
                                                     OUT overdue_s double precision)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    cutoff timestamptz := now() - make_interval(secs => window_s);
    oldest timestamptz;
BEGIN
    IF window_s IS NULL OR NOT (window_s >= 86400 AND window_s < 'Infinity') THEN
        RAISE EXCEPTION 'mailbus_retention_backlog: the window must be at least a day, got % s',
            window_s USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('mailbus.retention_s', window_s::text, true);
    IF what = 'sends' THEN
        SELECT count(*) INTO backlog_rows
            FROM (SELECT FROM email_sends_past_retention LIMIT cap) s;
        SELECT updated_at INTO oldest FROM email_sends_past_retention ORDER BY updated_at LIMIT 1;
    ELSIF what = 'dead letters' THEN
        SELECT count(*) INTO backlog_rows
            FROM (SELECT FROM email_dead_letters_past_retention LIMIT cap) s;
        SELECT created_at INTO oldest FROM email_dead_letters_past_retention ORDER BY created_at LIMIT 1;
    ELSIF what = 'delivery events' THEN
        SELECT count(*) INTO backlog_rows
            FROM (SELECT FROM delivery_events_past_retention LIMIT cap) s;
        SELECT received_at INTO oldest FROM delivery_events_past_retention ORDER BY received_at LIMIT 1;
    ELSIF what = 'campaign recipients' THEN
        SELECT count(*), min(e.ended) INTO backlog_rows, oldest FROM (
            SELECT coalesce(c.ended_at, c.updated_at) AS ended
            FROM campaign_recipients r JOIN campaigns c ON c.id = r.campaign_id
            WHERE c.state IN ('finished', 'cancelled')
              AND coalesce(c.ended_at, c.updated_at) < cutoff LIMIT cap) e;
    ELSIF what = 'campaigns' THEN
        SELECT count(*), min(e.ended) INTO backlog_rows, oldest FROM (
            SELECT coalesce(c.ended_at, c.updated_at) AS ended FROM campaigns c
            WHERE c.state IN ('finished', 'cancelled')
              AND coalesce(c.ended_at, c.updated_at) < cutoff LIMIT cap) e;
    ELSIF what = 'console audit' THEN
        SELECT count(*) INTO backlog_rows FROM (SELECT FROM console_audit WHERE at < cutoff
                                                LIMIT cap) s;
        SELECT at INTO oldest FROM console_audit WHERE at < cutoff ORDER BY at LIMIT 1;
    ELSE
        RAISE EXCEPTION 'mailbus_retention_backlog: nothing called %', what
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    overdue_s := coalesce(extract(epoch FROM cutoff - oldest)::double precision, 0);
END $$;

-- One row per `mailbus retention run` (not --dry-run): whether it caught up within its
-- budget, what it deleted, and what was left (rows past a window, counted up to a cap, and
-- how long the oldest of them has been past it). Written only by mailbus_retention_report,
-- which also forgets runs older than 30 days; read by the relay's metrics.
CREATE TABLE IF NOT EXISTS retention_runs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    finished_at  timestamptz      NOT NULL DEFAULT now(),
    complete     boolean          NOT NULL,
    deleted      bigint           NOT NULL,
    backlog_rows bigint           NOT NULL,
    overdue_s    double precision NOT NULL
);

CREATE OR REPLACE FUNCTION mailbus_retention_report(complete boolean, deleted bigint,
                                                    backlog_rows bigint,
                                                    overdue_s double precision)
    RETURNS void
    LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    DELETE FROM retention_runs WHERE finished_at < now() - interval '30 days';
    INSERT INTO retention_runs (complete, deleted, backlog_rows, overdue_s)
    VALUES (complete, greatest(deleted, 0), greatest(backlog_rows, 0), greatest(overdue_s, 0));
$$;

REVOKE ALL ON FUNCTION mailbus_prune_history(text, double precision, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION mailbus_retention_backlog(text, double precision, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION mailbus_retention_report(boolean, bigint, bigint, double precision)
    FROM PUBLIC;

-- Granted here too when the roles exist (a plain `mailbus migrate`); grants.sql carries
-- the same grants and is what `mailbus migrate --roles` applies.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_retention') THEN
        GRANT EXECUTE ON FUNCTION mailbus_prune_history(text, double precision, integer),
            mailbus_retention_backlog(text, double precision, bigint),
            mailbus_retention_report(boolean, bigint, bigint, double precision)
            TO mailbus_retention;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_relay') THEN
        GRANT SELECT ON retention_runs TO mailbus_relay;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_operator') THEN
        GRANT SELECT ON retention_runs TO mailbus_operator;
    END IF;
END $$;
