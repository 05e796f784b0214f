-- `mailbus retention run` deletes through this function alone (docs/retention.md,
-- docs/guides/security.md): mailbus_retention has EXECUTE on it and no DELETE grant, so a
-- leaked retention login cannot delete a pending send, or a settled one inside a day.
-- SECURITY DEFINER runs it as the owner of the tables; the pinned search_path keeps a
-- caller's temporary objects out of it. One batch of `what` ('sends': with their dead
-- letters and those letters' replays, attempts and resolutions by ON DELETE CASCADE;
-- 'dead letters': of no send, with their replays; 'delivery events'), at most `batch` rows
-- of those the *_past_retention views (0028) name under a window of `retention_s` seconds,
-- at least a day (MAILBUS_RETENTION's floor: it is the dedupe window). FOR UPDATE SKIP
-- LOCKED: a row a consumer or an operator holds is left for the next batch, and a row
-- changed meanwhile is checked again against the view's conditions once locked.
-- Returns how many rows of `what` it deleted. (NaN sorts above Infinity: refused too.)
-- Lock level: CREATE FUNCTION takes no lock on a table; writers never wait for it.
CREATE OR REPLACE FUNCTION mailbus_prune(what text, retention_s double precision,
                                         batch integer) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    deleted bigint;
BEGIN
    IF retention_s IS NULL OR NOT (retention_s >= 86400 AND retention_s < 'Infinity') THEN
        RAISE EXCEPTION 'mailbus_prune: the retention window must be at least a day, got % s',
            retention_s USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF batch IS NULL OR batch < 1 THEN
        RAISE EXCEPTION 'mailbus_prune: batch must be positive, got %', batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
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
    ELSIF what = 'delivery events' THEN
        WITH doomed AS (
            SELECT provider, event_id FROM delivery_events_past_retention
            ORDER BY received_at LIMIT batch
            FOR UPDATE SKIP LOCKED
        )
        DELETE FROM delivery_events e USING doomed
        WHERE e.provider = doomed.provider AND e.event_id = doomed.event_id;
    ELSE
        RAISE EXCEPTION 'mailbus_prune: nothing called %', what
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END $$;

-- A function is executable by PUBLIC unless revoked. The retention process of this build
-- calls it before `mailbus migrate --roles` runs again: granted here too when the role
-- exists; schemas/sql/roles/grants.sql carries the same grant.
REVOKE ALL ON FUNCTION mailbus_prune(text, double precision, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_retention') THEN
        GRANT EXECUTE ON FUNCTION mailbus_prune(text, double precision, integer)
            TO mailbus_retention;
    END IF;
END $$;
