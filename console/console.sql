-- Named queries of `mailbus console` (console/audit.py, console/figures.py). Everything
-- else the console shows comes from the rooms' own queries.

-- name: record
INSERT INTO console_audit (who, role, action, target, mails, detail)
VALUES (%(who)s, %(role)s, %(action)s, %(target)s, %(mails)s, %(detail)s)

-- name: recent
SELECT id, at, who, role, action, target, mails, detail
FROM console_audit ORDER BY id DESC LIMIT %(limit)s

-- name: accepted_per_minute
-- Calls that ended accepted, per minute of the last hour (email_attempts_at_idx).
SELECT date_trunc('minute', at) AS minute, count(*) AS n
FROM email_attempts
WHERE at >= now() - interval '1 hour' AND outcome = 'accepted'
GROUP BY 1 ORDER BY 1

-- name: dead_letters_per_hour
-- Dead letters written per hour of the last day (email_dead_letters_created_at_idx).
SELECT date_trunc('hour', created_at) AS hour, count(*) AS n
FROM email_dead_letters
WHERE created_at >= now() - interval '24 hours'
GROUP BY 1 ORDER BY 1

-- name: find_keys
-- A mail's dedupe key from what the operator typed: the key itself, a provider message id
-- or an address (lower(to_address): migration 0029's index), newest first.
SELECT dedupe_key, to_address, template, status, created_at
FROM email_sends
WHERE dedupe_key = %(q)s OR message_id = %(q)s OR lower(to_address) = lower(%(q)s)
ORDER BY id DESC LIMIT %(limit)s

-- name: open_sends
-- Per campaign, its mails not yet final: index-only on email_sends_campaign_idx
-- (campaign_id, status), whatever the number of its settled mails.
SELECT campaign_id, count(*) FROM email_sends
WHERE campaign_id = ANY(%(ids)s) AND status IN ('pending', 'sending', 'unknown')
GROUP BY campaign_id

-- name: campaign_feedback
-- Per campaign: its mails bounced or complained about and the addresses unsubscribed
-- through its links. Only those rows are read (migration 0043's partial indexes
-- email_sends_campaign_feedback_idx and email_suppressions_unsubscribed_idx), never every
-- mail of the campaign nor the whole suppression list.
SELECT count(*) FILTER (WHERE delivery_status = 'bounced') AS bounced,
       count(*) FILTER (WHERE delivery_status = 'complained') AS complained,
       (SELECT count(*) FROM email_suppressions x
        WHERE x.source = 'campaign:' || %(id)s::bigint AND x.reason = 'unsubscribed')
           AS unsubscribed
FROM email_sends
WHERE campaign_id = %(id)s AND delivery_status IN ('bounced', 'complained')
