-- The only changes the console makes to sends, as functions (docs/guides/console.md#its-database-role):
-- with them mailbus_console needs no UPDATE on email_sends at all, so a console taken over
-- cannot put an accepted mail back to pending, nor touch a send outside these moves.
-- Each is SECURITY DEFINER (it runs as the tables' owner) with a pinned search_path, runs
-- one fixed statement (the one the command line ran before, unchanged) and checks that the
-- move it belongs to is happening in this very transaction:
--   mailbus_replay_send: failed -> pending, only for a send whose dead letter this
--     transaction has just marked replayed (consumer/dead_letters.sql mark_replayed);
--   mailbus_campaign_*: a campaign's rows, only while the campaign is in the state the
--     move just gave it (campaigns/queries.sql transition): cancelled, paused, running.
--     That is a state, not this transaction's move: each may run again, so each is
--     idempotent (hold skips a row already held, which release's one century would not
--     bring back).
-- No lock is taken on a table: creating a function reads the catalog only.

CREATE OR REPLACE FUNCTION mailbus_replay_send(send bigint) RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    UPDATE email_sends
    SET status = 'pending', attempts = 0, next_try_at = NULL, published_at = NULL,
        last_error = NULL, lease_until = NULL, lease_token = NULL
    WHERE id = send AND status = 'failed'
      AND EXISTS (SELECT 1 FROM email_dead_letters d
                  WHERE d.send_id = send AND d.replayed_at = now())
    RETURNING id
$$;

CREATE OR REPLACE FUNCTION mailbus_campaign_lock_open(campaign bigint) RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT id FROM email_sends
    WHERE campaign_id = campaign AND status IN ('pending', 'sending', 'unknown')
      AND EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign AND c.state = 'cancelled')
    ORDER BY id
    FOR UPDATE
$$;

CREATE OR REPLACE FUNCTION mailbus_campaign_expire_unsent(campaign bigint) RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    UPDATE email_sends
    SET status = 'expired', last_error = 'campaign cancelled', published_at = NULL
    WHERE campaign_id = campaign AND status = 'pending' AND in_doubt_since IS NULL
      AND EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign AND c.state = 'cancelled')
    RETURNING id
$$;

CREATE OR REPLACE FUNCTION mailbus_campaign_expire_in_doubt(campaign bigint)
RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    UPDATE email_sends
    SET expires_at = LEAST(expires_at, now()),
        next_try_at = CASE WHEN status = 'sending' THEN next_try_at END,
        published_at = CASE WHEN status = 'pending' THEN NULL ELSE published_at END
    WHERE campaign_id = campaign AND status IN ('pending', 'sending', 'unknown')
      AND EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign AND c.state = 'cancelled')
    RETURNING id
$$;

CREATE OR REPLACE FUNCTION mailbus_campaign_hold(campaign bigint) RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    UPDATE email_sends
    SET next_try_at = coalesce(next_try_at, now()) + interval '100 years', published_at = NULL
    WHERE campaign_id = campaign AND status = 'pending'
      AND (next_try_at IS NULL OR next_try_at <= now() + interval '50 years')  -- held once
      AND EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign AND c.state = 'paused')
    RETURNING id
$$;

CREATE OR REPLACE FUNCTION mailbus_campaign_release(campaign bigint) RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    UPDATE email_sends
    SET next_try_at = CASE WHEN next_try_at > now() + interval '50 years'
                           THEN next_try_at - interval '100 years' ELSE next_try_at END,
        published_at = NULL
    WHERE campaign_id = campaign AND status = 'pending'
      AND EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign AND c.state = 'running')
    RETURNING id
$$;

REVOKE ALL ON FUNCTION mailbus_replay_send(bigint), mailbus_campaign_lock_open(bigint),
    mailbus_campaign_expire_unsent(bigint), mailbus_campaign_expire_in_doubt(bigint),
    mailbus_campaign_hold(bigint), mailbus_campaign_release(bigint) FROM PUBLIC;
-- Granted here too when the roles exist; grants.sql carries the same grants.
DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['mailbus_operator', 'mailbus_console'] LOOP
        IF EXISTS (SELECT FROM pg_roles WHERE rolname = name) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION mailbus_replay_send(bigint),'
                           ' mailbus_campaign_lock_open(bigint),'
                           ' mailbus_campaign_expire_unsent(bigint),'
                           ' mailbus_campaign_expire_in_doubt(bigint),'
                           ' mailbus_campaign_hold(bigint), mailbus_campaign_release(bigint)'
                           ' TO %I', name);
        END IF;
    END LOOP;
END $$;
