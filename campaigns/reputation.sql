-- The reputation guard (campaigns/guard.py). Rates count the mail accepted since %(since)s
-- (the window's start, from PostgreSQL's clock); bounced and complained are those of them
-- with a hard-bounce or a complaint event. A send's provider is email_sends.provider, or
-- %(primary)s (MAILBUS_PROVIDER) where it is NULL. The accepted mail is counted through
-- email_sends_accepted_idx (0061: index-only, a day of mail, not the table); the events from
-- delivery_events_received_at_idx (an event comes after its acceptance, so those of the
-- window's mail were received in it), each joined to its send by email_sends_message_id_idx.

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
), bad AS (
    SELECT coalesce(s.provider, %(primary)s) AS provider,
           count(DISTINCT s.id) FILTER (WHERE e.type = 'bounced') AS bounced,
           count(DISTINCT s.id) FILTER (WHERE e.type = 'complained') AS complained
    FROM delivery_events e
    JOIN email_sends s ON s.message_id = e.message_id
    WHERE e.received_at >= %(since)s AND e.matched
      AND (e.type = 'complained' OR (e.type = 'bounced' AND e.bounce = 'hard'))
      AND s.accepted_at >= %(since)s
    GROUP BY 1
)
SELECT sent.provider, sent.sent, coalesce(bad.bounced, 0), coalesce(bad.complained, 0)
FROM sent LEFT JOIN bad USING (provider)
ORDER BY sent.provider

-- name: campaign_rates
-- Running and paused campaigns, each from its last start or resume (guarded_since) on.
WITH c AS (
    SELECT id, state, greatest(%(since)s, coalesce(guarded_since, %(since)s)) AS since
    FROM campaigns WHERE state IN ('running', 'paused')
), sent AS (
    SELECT s.campaign_id, coalesce(s.provider, %(primary)s) AS provider, count(*) AS sent
    FROM email_sends s JOIN c ON c.id = s.campaign_id
    WHERE s.accepted_at >= %(since)s AND s.accepted_at >= c.since
    GROUP BY 1, 2
), bad AS (
    SELECT s.campaign_id, coalesce(s.provider, %(primary)s) AS provider,
           count(DISTINCT s.id) FILTER (WHERE e.type = 'bounced') AS bounced,
           count(DISTINCT s.id) FILTER (WHERE e.type = 'complained') AS complained
    FROM delivery_events e
    JOIN email_sends s ON s.message_id = e.message_id
    JOIN c ON c.id = s.campaign_id
    WHERE e.received_at >= %(since)s AND e.matched
      AND (e.type = 'complained' OR (e.type = 'bounced' AND e.bounce = 'hard'))
      AND s.accepted_at >= c.since
    GROUP BY 1, 2
)
SELECT sent.campaign_id, c.state, sent.provider, sent.sent, coalesce(bad.bounced, 0),
       coalesce(bad.complained, 0)
FROM sent JOIN c ON c.id = sent.campaign_id LEFT JOIN bad USING (campaign_id, provider)
ORDER BY sent.campaign_id, sent.provider
