-- Every statement that waits for many of email_sends' row locks takes them in id order,
-- as the consumer's claim and cancel's mailbus_campaign_lock_open did already: pause and
-- resume here, the webhooks' mailbus_settle_from_events below, and the consumer's settle
-- (consumer/queries.sql). Their UPDATEs locked rows in the order their plans met them, the
-- heap's, which a row's every update reshuffles: `campaign pause` on a campaign whose mail
-- was retrying held row A and waited for row B, which a consumer's claim held while it
-- waited for A, and PostgreSQL aborted the pause with "deadlock detected"
-- (tests/integration/test_campaign_lock_order.py). Statements that lock in one order never
-- wait for each other in a circle.
-- A sub-select locks the rows and re-checks them (FOR UPDATE re-reads a row a concurrent
-- transaction changed and drops it if it no longer qualifies); the UPDATE then writes
-- those, as relay/queries.sql's claim_due does. Same behaviour otherwise.
-- Lock level: CREATE OR REPLACE FUNCTION reads the catalogue only and keeps the functions'
-- grants (and their ownership and SECURITY DEFINER).
CREATE OR REPLACE FUNCTION mailbus_campaign_hold(campaign bigint) RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    UPDATE email_sends
    SET next_try_at = coalesce(next_try_at, now()) + interval '100 years', published_at = NULL
    WHERE id = ANY(ARRAY(
        SELECT id FROM email_sends
        WHERE campaign_id = campaign AND status = 'pending'
          AND (next_try_at IS NULL OR next_try_at <= now() + interval '50 years')  -- held once
          AND EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign AND c.state = 'paused')
        ORDER BY id
        FOR UPDATE
    ))
    RETURNING id
$$;

CREATE OR REPLACE FUNCTION mailbus_campaign_release(campaign bigint) RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    UPDATE email_sends
    SET next_try_at = CASE WHEN next_try_at > now() + interval '50 years'
                           THEN next_try_at - interval '100 years' ELSE next_try_at END,
        published_at = NULL
    WHERE id = ANY(ARRAY(
        SELECT id FROM email_sends
        WHERE campaign_id = campaign AND status = 'pending'
          AND EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign AND c.state = 'running')
        ORDER BY id
        FOR UPDATE
    ))
    RETURNING id
$$;

-- 0069's function, its rows locked in id order first (the rows a batch of events may settle).
CREATE OR REPLACE FUNCTION mailbus_settle_from_events(settle jsonb, through jsonb)
    RETURNS SETOF text
    LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    UPDATE email_sends s
    SET status = 'accepted', message_id = b.message_id, next_try_at = NULL, last_error = NULL,
        updated_at = now()
    FROM jsonb_to_recordset(settle) AS b (provider text, dedupe_key text, key text, message_id text)
    WHERE s.id = ANY(ARRAY(
            SELECT x.id FROM email_sends x
            WHERE x.dedupe_key = ANY(ARRAY(SELECT y.dedupe_key
                                           FROM jsonb_to_recordset(settle) AS y (dedupe_key text)))
              AND (x.status = 'unknown' OR (x.status = 'pending' AND x.attempts > 0))
              AND x.message_id IS NULL
            ORDER BY x.id
            FOR UPDATE))
      AND s.dedupe_key = b.dedupe_key AND coalesce(s.provider_key, s.dedupe_key) = b.key
      AND (s.status = 'unknown' OR (s.status = 'pending' AND s.attempts > 0))
      AND s.message_id IS NULL
      AND (coalesce(through ->> coalesce(s.provider, ''), s.provider) IS NULL
           OR coalesce(through ->> coalesce(s.provider, ''), s.provider) = b.provider)
    RETURNING coalesce(s.provider_key, s.dedupe_key)
$$;
