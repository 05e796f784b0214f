-- What `mailbus retention run` may delete (docs/retention.md), stated once: it deletes
-- through these views and `--dry-run` counts them. The window is the transaction's setting
-- mailbus.retention_s (MAILBUS_RETENTION in seconds; unset, a read fails rather than guess);
-- the cutoff is PostgreSQL's now() minus it. The key columns are expressions, so read-only:
-- `FOR UPDATE` through a view needs an UPDATE grant on one of its columns
-- (schemas/sql/roles/grants.sql gives mailbus_retention UPDATE on them), which then
-- changes nothing.
--
-- A send goes only when settled (accepted, failed, expired, suppressed) and unchanged for
-- the whole window: never pending, sending or unknown, never while one of its dead letters
-- is not yet on Kafka, never while its campaign is still going.
CREATE OR REPLACE VIEW email_sends_past_retention AS
SELECT s.id + 0 AS id, s.updated_at FROM email_sends s
WHERE s.status IN ('accepted', 'failed', 'expired', 'suppressed')
  AND s.updated_at < now() - make_interval(
      secs => current_setting('mailbus.retention_s')::double precision)
  AND NOT EXISTS (SELECT FROM email_dead_letters d
                  WHERE d.send_id = s.id AND d.published_at IS NULL)
  AND NOT EXISTS (SELECT FROM campaigns c
                  WHERE c.id = s.campaign_id AND c.state NOT IN ('finished', 'cancelled'));

-- Dead letters of no send (undecodable messages, intake events), once on Kafka; a send's
-- dead letters go with the send.
CREATE OR REPLACE VIEW email_dead_letters_past_retention AS
SELECT d.id + 0 AS id, d.created_at FROM email_dead_letters d
WHERE d.send_id IS NULL AND d.published_at IS NOT NULL
  AND d.created_at < now() - make_interval(
      secs => current_setting('mailbus.retention_s')::double precision);

-- Delivery events received before the window (a send keeps its latest on its own row).
CREATE OR REPLACE VIEW delivery_events_past_retention AS
SELECT e.provider || '' AS provider, e.event_id || '' AS event_id, e.received_at
FROM delivery_events e
WHERE e.received_at < now() - make_interval(
      secs => current_setting('mailbus.retention_s')::double precision);
