-- Not a migration: the statement-level alternative to 0015's row-level outcome-event
-- trigger, kept for bench/send_event_trigger.py. Measured costlier than 0015 on every
-- statement but a multi-row settle (docs/benchmarks/speed.md), so 0015's trigger stays.
-- Outcome events recorded once per statement (issue 37, decision 2): the same coverage as
-- 0015 (every path that changes a send records its event, whoever wrote the UPDATE), at one
-- function call and one INSERT … SELECT per statement instead of per row. The statement's
-- rows come from its transition tables: the rows as inserted, or each updated row before
-- and after, matched by id (an identity no path of mailbus updates; `SET id = DEFAULT`
-- would give a row a new id, and its change would record nothing).
-- Reported as before: status reaching accepted, failed, unknown, expired or suppressed, and
-- delivery_status reaching a new value; a status and a delivery change of one row give two
-- events, status first; rows in id order. One NOTIFY on the event lane's channel, only when
-- an event was recorded.
-- A statement trigger with transition tables takes no column list (UPDATE OF) and no WHEN:
-- it runs for every UPDATE of email_sends, also one of 0 rows, and the relay's
-- published_at marks and the pending/sending churn pass through its query and record
-- nothing.
-- A row's events are a LATERAL VALUES of two, written out in both branches.
-- Lock level: CREATE/DROP TRIGGER take SHARE ROW EXCLUSIVE on email_sends for an instant
-- (no row is read); `mailbus migrate` takes it with its lock timeout.
CREATE OR REPLACE FUNCTION mailbus_record_send_event() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    recorded bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO email_send_events (send_id, dedupe_key, template, event, status,
                                       delivery_status, message_id, error, occurred_at)
        SELECT n.id, n.dedupe_key, n.template, e.event, n.status, n.delivery_status,
               n.message_id, e.error, e.occurred_at
        FROM new_sends n
        CROSS JOIN LATERAL (VALUES
            (1, n.status, CASE WHEN n.status <> 'accepted' THEN n.last_error END, n.updated_at,
             n.status IN ('accepted', 'failed', 'unknown', 'expired', 'suppressed')),
            (2, n.delivery_status, NULL, coalesce(n.last_event_at, now()),
             n.delivery_status IS NOT NULL)
        ) e (kind, event, error, occurred_at, reported)
        WHERE e.reported
        ORDER BY n.id, e.kind;
    ELSIF (SELECT count(*) FROM new_sends) <= 64 THEN
        -- A plan kept for the session (made for some statement of at most 64 rows, so a
        -- nested loop joining old to new stays small): no planning per statement.
        INSERT INTO email_send_events (send_id, dedupe_key, template, event, status,
                                       delivery_status, message_id, error, occurred_at)
        SELECT n.id, n.dedupe_key, n.template, e.event, n.status, n.delivery_status,
               n.message_id, e.error, e.occurred_at
        FROM new_sends n JOIN old_sends o ON o.id = n.id
        CROSS JOIN LATERAL (VALUES
            (1, n.status, CASE WHEN n.status <> 'accepted' THEN n.last_error END, n.updated_at,
             n.status IN ('accepted', 'failed', 'unknown', 'expired', 'suppressed')
             AND n.status IS DISTINCT FROM o.status),
            (2, n.delivery_status, NULL, coalesce(n.last_event_at, now()),
             n.delivery_status IS NOT NULL
             AND n.delivery_status IS DISTINCT FROM o.delivery_status)
        ) e (kind, event, error, occurred_at, reported)
        WHERE e.reported
        ORDER BY n.id, e.kind;
    ELSE
        -- Planned for each statement: a plan kept from a one-row UPDATE joins old to new
        -- in a nested loop, quadratic in a relay mark of 2,000 rows (310 ms instead of 27).
        EXECUTE $q$
        INSERT INTO email_send_events (send_id, dedupe_key, template, event, status,
                                       delivery_status, message_id, error, occurred_at)
        SELECT n.id, n.dedupe_key, n.template, e.event, n.status, n.delivery_status,
               n.message_id, e.error, e.occurred_at
        FROM new_sends n JOIN old_sends o ON o.id = n.id
        CROSS JOIN LATERAL (VALUES
            (1, n.status, CASE WHEN n.status <> 'accepted' THEN n.last_error END, n.updated_at,
             n.status IN ('accepted', 'failed', 'unknown', 'expired', 'suppressed')
             AND n.status IS DISTINCT FROM o.status),
            (2, n.delivery_status, NULL, coalesce(n.last_event_at, now()),
             n.delivery_status IS NOT NULL
             AND n.delivery_status IS DISTINCT FROM o.delivery_status)
        ) e (kind, event, error, occurred_at, reported)
        WHERE e.reported
        ORDER BY n.id, e.kind
        $q$;
    END IF;
    GET DIAGNOSTICS recorded = ROW_COUNT;
    IF recorded > 0 THEN
        PERFORM pg_notify('mailbus_send_events', '');
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS email_sends_record_event_update ON email_sends;
CREATE TRIGGER email_sends_record_event_update
    AFTER UPDATE ON email_sends
    REFERENCING OLD TABLE AS old_sends NEW TABLE AS new_sends
    FOR EACH STATEMENT
    EXECUTE FUNCTION mailbus_record_send_event();

DROP TRIGGER IF EXISTS email_sends_record_event_insert ON email_sends;
CREATE TRIGGER email_sends_record_event_insert
    AFTER INSERT ON email_sends
    REFERENCING NEW TABLE AS new_sends
    FOR EACH STATEMENT
    EXECUTE FUNCTION mailbus_record_send_event();
