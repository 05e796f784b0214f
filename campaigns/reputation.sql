-- The reputation guard (campaigns/guard.py). Rates count the mail accepted since %(since)s
-- (the window's start, from PostgreSQL's clock); bounced and complained are those of them
-- with a hard-bounce or a complaint event. A send's provider is email_sends.provider, or
-- %(primary)s (MAILBUS_PROVIDER) where it is NULL. The accepted mail is counted through
-- email_sends_accepted_idx (0061: index-only, the window's mail once, not the table); the
-- hard bounces and complaints come from delivery_events_received_at_idx (an event comes
-- after its acceptance, so those of the window's mail were received in it), their sends
-- found by `message_id = ANY(ARRAY(...))` through email_sends_message_id_idx (joined
-- plainly, the planner scanned the whole table).

-- name: guard_lock
-- One guard round at a time across the relay processes (transaction-scoped); false: another
-- process checks now, this one skips its round.
SELECT pg_try_advisory_xact_lock(hashtext('mailbus.campaigns.reputation'))

-- name: window_start
SELECT now() - make_interval(secs => %(window_s)s)

-- name: provider_rates
WITH sent AS (
    SELECT coalesce(provider, %(primary)s) AS provider, count(*) AS sent
    FROM email_sends
    WHERE accepted_at >= %(since)s
    GROUP BY 1
), ev AS MATERIALIZED (
    SELECT message_id, type FROM delivery_events
    WHERE received_at >= %(since)s AND matched
      AND (type = 'complained' OR (type = 'bounced' AND bounce = 'hard'))
), bad AS (
    SELECT coalesce(s.provider, %(primary)s) AS provider,
           count(DISTINCT s.id) FILTER (WHERE e.type = 'bounced') AS bounced,
           count(DISTINCT s.id) FILTER (WHERE e.type = 'complained') AS complained
    FROM email_sends s JOIN ev e ON e.message_id = s.message_id
    WHERE s.message_id = ANY(ARRAY(SELECT message_id FROM ev))
      AND s.accepted_at >= %(since)s
    GROUP BY 1
)
SELECT sent.provider, sent.sent, coalesce(bad.bounced, 0), coalesce(bad.complained, 0)
FROM sent LEFT JOIN bad USING (provider)
ORDER BY sent.provider

-- name: campaign_rates
-- Running and paused campaigns, each from its last start or resume (guarded_since) on.
WITH c AS MATERIALIZED (
    SELECT id, state, greatest(%(since)s, coalesce(guarded_since, %(since)s)) AS since
    FROM campaigns WHERE state IN ('running', 'paused')
), window_mail AS MATERIALIZED (  -- the window scanned once, whatever the campaigns
    SELECT campaign_id, coalesce(provider, %(primary)s) AS provider, accepted_at
    FROM email_sends
    WHERE accepted_at >= %(since)s AND campaign_id IS NOT NULL
), sent AS (
    SELECT w.campaign_id, w.provider, count(*) AS sent
    FROM window_mail w JOIN c ON c.id = w.campaign_id
    WHERE w.accepted_at >= c.since
    GROUP BY 1, 2
), ev AS MATERIALIZED (
    SELECT message_id, type FROM delivery_events
    WHERE received_at >= %(since)s AND matched
      AND (type = 'complained' OR (type = 'bounced' AND bounce = 'hard'))
), bad AS (
    SELECT s.campaign_id, coalesce(s.provider, %(primary)s) AS provider,
           count(DISTINCT s.id) FILTER (WHERE e.type = 'bounced') AS bounced,
           count(DISTINCT s.id) FILTER (WHERE e.type = 'complained') AS complained
    FROM email_sends s
    JOIN ev e ON e.message_id = s.message_id
    JOIN c ON c.id = s.campaign_id
    WHERE s.message_id = ANY(ARRAY(SELECT message_id FROM ev))
      AND s.accepted_at >= c.since
    GROUP BY 1, 2
)
SELECT sent.campaign_id, c.state, sent.provider, sent.sent, coalesce(bad.bounced, 0),
       coalesce(bad.complained, 0)
FROM sent JOIN c ON c.id = sent.campaign_id LEFT JOIN bad USING (campaign_id, provider)
ORDER BY sent.campaign_id, sent.provider
