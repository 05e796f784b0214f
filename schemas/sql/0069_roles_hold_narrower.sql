-- Roles that hold, narrower still (docs/guides/security.md#least-privilege):
--
-- 1. mailbus_webhooks settles a send from its provider's own event through
--    mailbus_settle_from_events alone (feedback/events.sql settle_from_events), and so
--    loses its UPDATE on email_sends' status, message_id, next_try_at, last_error and
--    updated_at. With them the internet-facing login could set any send to any status: a
--    pending mail `accepted` (never sent) or `expired`, an accepted one `pending` again
--    (the consumer republishes a pending row published long ago: sent twice). The function
--    makes only the move the event proves, to accepted, of a send left unknown or pending
--    after a call, with no message id, whose provider key the event carries, under
--    record_events' provider rule.
--
-- 2. A suppression of all mail (a hard bounce, a manual entry) is narrowed to bulk mail only
--    (its reason changed to a complaint's or an unsubscribe's, migration 0019) only by a
--    role that may remove it (the operator's, the console's): the webhooks and consumer
--    roles need UPDATE on reason and source to widen an entry, never to narrow one, which
--    would send password resets to a bouncing address again.
--
-- 3. email_send_resolutions (the audit of `send resolve` and `send cancel`) and
--    email_replays (of `dlq replay` and the console's replays) say which database login
--    wrote each row, and when, as console_audit does (0052): db_user and at are set by the
--    trigger below from session_user and now(), whatever the INSERT says (an operator's or
--    the console's login could write any name at any time), and no row is ever updated.
--    resolved_by and replayed_by stay the name the command gives. Rows written before have
--    no db_user.
--
-- 4. A campaign's end is the database's clock: retention deletes an ended campaign's
--    recipients, then the campaign, once coalesce(ended_at, updated_at) is past their
--    windows (0062), and the relay (its pacer), the operator and the console may update
--    those columns. A leaked relay login setting a running campaign `finished` 400 days
--    ago had its audience deleted by the next hourly run. For a role that may not delete
--    a campaign, the trigger below sets ended_at to now() when the state becomes finished
--    or cancelled (and keeps it otherwise) and updated_at to now(), as every statement of
--    ours writes them anyway.
--
-- mailbus_settle_from_events is SECURITY DEFINER (it runs as the tables' owner); its
-- pinned search_path keeps a caller's temporary objects out of it. Lock level: CREATE
-- FUNCTION, GRANT and REVOKE take no lock on a table; CREATE TRIGGER holds its table's
-- SHARE ROW EXCLUSIVE lock and ADD COLUMN (nullable, no default: the catalog only) its
-- table's ACCESS EXCLUSIVE lock for an instant (no row is read), each taken with migrate's
-- lock timeout.
CREATE OR REPLACE FUNCTION mailbus_settle_from_events(settle jsonb, through jsonb)
    RETURNS SETOF text
    LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    UPDATE email_sends s
    SET status = 'accepted', message_id = b.message_id, next_try_at = NULL, last_error = NULL,
        updated_at = now()
    FROM jsonb_to_recordset(settle) AS b (provider text, dedupe_key text, key text, message_id text)
    WHERE s.dedupe_key = ANY(ARRAY(SELECT x.dedupe_key
                                   FROM jsonb_to_recordset(settle) AS x (dedupe_key text)))
      AND s.dedupe_key = b.dedupe_key AND coalesce(s.provider_key, s.dedupe_key) = b.key
      AND (s.status = 'unknown' OR (s.status = 'pending' AND s.attempts > 0))
      AND s.message_id IS NULL
      AND (coalesce(through ->> coalesce(s.provider, ''), s.provider) IS NULL
           OR coalesce(through ->> coalesce(s.provider, ''), s.provider) = b.provider)
    RETURNING coalesce(s.provider_key, s.dedupe_key)
$$;
-- A function is executable by PUBLIC unless revoked.
REVOKE ALL ON FUNCTION mailbus_settle_from_events(jsonb, jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION mailbus_suppression_kept() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT has_table_privilege(current_user, 'email_suppressions', 'DELETE') THEN
        RAISE EXCEPTION 'only a role that may remove a suppression may narrow it to bulk mail'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER email_suppressions_kept AFTER UPDATE ON email_suppressions
    FOR EACH ROW WHEN (OLD.scope = 'all' AND NEW.scope <> 'all')
    EXECUTE FUNCTION mailbus_suppression_kept();

ALTER TABLE email_send_resolutions ADD COLUMN IF NOT EXISTS db_user text;
ALTER TABLE email_replays ADD COLUMN IF NOT EXISTS db_user text;
CREATE OR REPLACE FUNCTION mailbus_audit_row_stamped() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION '% is append-only', TG_TABLE_NAME
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    NEW.db_user := session_user;
    NEW.at := now();
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER email_send_resolutions_stamped
    BEFORE INSERT OR UPDATE ON email_send_resolutions
    FOR EACH ROW EXECUTE FUNCTION mailbus_audit_row_stamped();
CREATE OR REPLACE TRIGGER email_replays_stamped
    BEFORE INSERT OR UPDATE ON email_replays
    FOR EACH ROW EXECUTE FUNCTION mailbus_audit_row_stamped();

CREATE OR REPLACE FUNCTION mailbus_campaign_times_stamped() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF has_table_privilege(current_user, 'campaigns', 'DELETE') THEN
        RETURN NEW;
    END IF;
    NEW.updated_at := now();
    IF NEW.state IN ('finished', 'cancelled')
       AND (TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM NEW.state) THEN
        NEW.ended_at := now();
    ELSIF TG_OP = 'UPDATE' THEN
        NEW.ended_at := OLD.ended_at;
    ELSE
        NEW.ended_at := NULL;
    END IF;
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER campaigns_times_stamped BEFORE INSERT OR UPDATE ON campaigns
    FOR EACH ROW EXECUTE FUNCTION mailbus_campaign_times_stamped();

-- Granted (and the old grants revoked) here too when the role exists; grants.sql carries
-- the same and is what `mailbus migrate --roles` applies.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_webhooks') THEN
        REVOKE UPDATE (status, message_id, next_try_at, last_error, updated_at)
            ON email_sends FROM mailbus_webhooks;
        GRANT EXECUTE ON FUNCTION mailbus_settle_from_events(jsonb, jsonb) TO mailbus_webhooks;
    END IF;
END $$;
