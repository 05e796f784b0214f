-- name: record_event
-- One delivery event in one statement. The event row is inserted once per (provider,
-- event id); only when it was new does anything else change: the sends with its
-- message_id take its status unless they already show a later event (a tie at the same
-- instant goes to the higher rank, see feedback/events.py), and a hard bounce or a
-- complaint suppresses their addresses, lower-cased. Returns one row:
-- (inserted, matched, updated, suppressed).
WITH target AS (
    SELECT id, to_address FROM email_sends WHERE message_id = %(message_id)s
), event AS (
    INSERT INTO delivery_events (provider, event_id, type, bounce, message_id, occurred_at, matched)
    SELECT %(provider)s, %(event_id)s, %(type)s, %(bounce)s, %(message_id)s, %(occurred_at)s,
           EXISTS (SELECT 1 FROM target)
    ON CONFLICT (provider, event_id) DO NOTHING
    RETURNING matched
), updated AS (
    UPDATE email_sends s
    SET delivery_status = %(type)s, last_event_at = %(occurred_at)s
    FROM target t
    WHERE s.id = t.id
      AND EXISTS (SELECT 1 FROM event)
      AND (s.last_event_at IS NULL
           OR s.last_event_at < %(occurred_at)s
           OR (s.last_event_at = %(occurred_at)s
               AND coalesce(array_position(%(ranks)s::text[], s.delivery_status), 0) < %(rank)s))
    RETURNING s.id
), suppressed AS (
    INSERT INTO email_suppressions (address, reason, source)
    SELECT DISTINCT lower(t.to_address), %(reason)s, %(source)s
    FROM target t
    WHERE %(suppress)s AND EXISTS (SELECT 1 FROM event)
    ON CONFLICT (address) DO NOTHING
    RETURNING address
)
SELECT EXISTS (SELECT 1 FROM event),
       coalesce((SELECT matched FROM event), EXISTS (SELECT 1 FROM target)),
       (SELECT count(*) FROM updated),
       (SELECT count(*) FROM suppressed)

-- name: ready
SELECT 1
