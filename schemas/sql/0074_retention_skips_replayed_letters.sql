-- Retention's prune of sends no longer waits for a dead letter a replay holds. It locked a
-- batch of sends (SKIP LOCKED), then deleted their dead letters, waiting for any a
-- transaction held; `dlq replay` and the console's replay lock the letter first
-- (consumer/dead_letters.sql mark_replayed), then reset its send (mailbus_replay_send,
-- 0053), waiting for the send the prune held: each waited for the other and PostgreSQL
-- aborted one with "deadlock detected" (tests/integration/test_row_lock_order.py). The
-- prune now locks the batch's letters SKIP LOCKED too and keeps, for a later batch, every
-- send one of whose letters it could not lock; it never waits for a row. It picks up to
-- 100 sends more than the batch, so a kept send does not leave the batch short: a short
-- batch tells the caller the table is done (consumer/retention.py keep_going). A letter
-- added to a send it has locked waits for the prune (its foreign key's lock on the send).
-- 0064's function otherwise as it was.
-- Lock level: CREATE OR REPLACE FUNCTION reads the catalogue only and keeps the function's
-- grants (and its ownership and SECURITY DEFINER); writers never wait.
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
        WITH picked AS (
            SELECT id, updated_at FROM email_sends_past_retention
            ORDER BY updated_at LIMIT batch + 100  -- room for the sends kept below
            FOR UPDATE SKIP LOCKED
        ), letters AS (  -- a letter a replay holds is skipped, not waited for ...
            SELECT d.id, d.send_id FROM email_dead_letters d
            WHERE d.send_id = ANY(ARRAY(SELECT id FROM picked))
            FOR UPDATE SKIP LOCKED
        ), doomed AS (  -- ... and its send kept for the next batch
            SELECT p.id FROM picked p
            WHERE NOT EXISTS (SELECT FROM email_dead_letters d
                              WHERE d.send_id = p.id
                                AND d.id <> ALL(ARRAY(SELECT id FROM letters)))
            ORDER BY p.updated_at LIMIT batch
        ), replays_gone AS (
            DELETE FROM email_replays r USING letters l, doomed
            WHERE r.dead_letter_id = l.id AND l.send_id = doomed.id
        ), letters_gone AS (
            DELETE FROM email_dead_letters d USING letters l, doomed
            WHERE d.id = l.id AND l.send_id = doomed.id
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
