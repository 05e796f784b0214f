-- The client's scheduled send, status read-back and cancel (client/README.md). Grants and a
-- function only: no table is rewritten or scanned, each statement holds its lock for an
-- instant.

-- `mailbus send cancel` and Client.cancel (mailbus_client/queries.sql, cancel_send): a
-- pending send no call was made for becomes expired, so it never goes out, with its audit
-- row in the same transaction. A row already claimed (sending) or tried (attempts > 0,
-- its outcome is the provider's to tell) is not touched; the consumer's claim takes only
-- pending/unknown rows. Returns the send's id, NULL when nothing was cancelled.
-- SECURITY DEFINER: the enqueuer may cancel this way without any UPDATE grant on
-- email_sends (a column grant could not stop it from setting any status on any row).
-- It runs for any key, so a caller in mailbus_enqueuer and not in mailbus_operator (a
-- domain service) may not cancel a campaign's mail (the operator's `campaign cancel`
-- does), and its audit row names its login beside the name it gives, which is its own
-- to choose ("shop (login svc_shop)").
CREATE OR REPLACE FUNCTION mailbus_cancel_send(send_key text, cancelled_by text)
    RETURNS bigint LANGUAGE plpgsql
    SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    cancelled bigint;
    service boolean := EXISTS (
        SELECT FROM pg_roles r WHERE r.rolname = 'mailbus_enqueuer'
            AND pg_has_role(session_user, r.oid, 'MEMBER'))
        AND NOT EXISTS (
        SELECT FROM pg_roles r WHERE r.rolname = 'mailbus_operator'
            AND pg_has_role(session_user, r.oid, 'MEMBER'));
BEGIN
    UPDATE email_sends
    SET status = 'expired', expires_at = now(), next_try_at = NULL,
        last_error = 'cancelled by hand', updated_at = now()
    WHERE dedupe_key = send_key AND status = 'pending' AND attempts = 0
      AND (campaign_id IS NULL OR NOT service)
    RETURNING id INTO cancelled;
    IF cancelled IS NOT NULL THEN
        INSERT INTO email_send_resolutions (send_id, action, from_status, resolved_by)
        VALUES (cancelled, 'cancelled', 'pending',
                CASE WHEN service AND cancelled_by IS DISTINCT FROM session_user::text
                     THEN format('%s (login %s)', cancelled_by, session_user)
                     ELSE cancelled_by END);
    END IF;
    RETURN cancelled;
END;
$$;
-- Functions are executable by PUBLIC by default: only the roles that cancel may.
REVOKE ALL ON FUNCTION mailbus_cancel_send(text, text) FROM PUBLIC;

-- The enqueuer schedules (next_try_at: not before), reads back what it may know of a send
-- (never its address, payload or error text) and cancels through the function above.
-- Granted here when the roles exist; schemas/sql/roles/grants.sql carries the same grants.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_enqueuer') THEN
        GRANT INSERT (next_try_at) ON email_sends TO mailbus_enqueuer;
        GRANT SELECT (delivery_status, attempts, message_id, next_try_at, expires_at,
                      created_at, updated_at) ON email_sends TO mailbus_enqueuer;
        GRANT EXECUTE ON FUNCTION mailbus_cancel_send(text, text) TO mailbus_enqueuer;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_operator') THEN
        GRANT EXECUTE ON FUNCTION mailbus_cancel_send(text, text) TO mailbus_operator;
    END IF;
END $$;
