-- name: name_lock
-- One `campaign create` per name at a time (released at commit): the look-up of the name
-- and the insert below cannot interleave with another create's.
SELECT pg_advisory_xact_lock(hashtext('mailbus.campaign_create'), hashtext(%(name)s))

-- name: campaign_named
-- The campaign a name already names (the newest, should older versions have made two).
SELECT id, template, priority, audience, importing
FROM campaigns WHERE name = %(name)s ORDER BY id DESC LIMIT 1

-- name: insert_campaign
-- A campaign whose audience is still to be imported (store.import_audience).
INSERT INTO campaigns (name, template, priority, rate_per_min, window_start, window_end,
                       daily_cap, warmup, audience, importing)
VALUES (%(name)s, %(template)s, %(priority)s, %(rate_per_min)s, %(window_start)s,
        %(window_end)s, %(daily_cap)s, %(warmup)s, %(audience)s, true)
RETURNING id

-- name: copy_recipients
COPY campaign_recipients (campaign_id, ordinal, user_id, email, variables) FROM STDIN

-- name: import_memory
-- The repeated-user search of a million-line audience hashes in memory instead of temp
-- files; JIT compiling takes longer than it saves here.
SELECT set_config('work_mem', '64MB', true), set_config('jit', 'off', true)

-- name: import_lock
-- One importer per campaign (a session lock, released when its connection ends, crash or
-- not): parts must commit in line order for the pacer's checkpoint to skip nothing.
SELECT pg_try_advisory_lock(hashtext('mailbus.campaign_import'), %(id)s::int)

-- name: import_position
SELECT state, importing, imported_through, imported_key FROM campaigns WHERE id = %(id)s

-- name: import_counts
SELECT recipients, invalid_lines FROM campaigns WHERE id = %(id)s

-- name: record_part
-- A part of the audience, in the transaction that copied its recipients. No row: the
-- campaign is no longer importing (cancelled meanwhile).
UPDATE campaigns
SET recipients = recipients + %(stored)s,
    invalid_lines = invalid_lines + %(rejected)s,
    imported_through = %(through)s,
    imported_key = %(key)s,
    updated_at = now()
WHERE id = %(id)s AND importing
RETURNING id

-- name: lock_importing
-- The import's last step waits for a pacer tick to end, then reads the checkpoint.
SELECT checkpoint FROM campaigns WHERE id = %(id)s AND importing FOR UPDATE

-- name: finish_import
-- Repeated lines leave the counts; those the pacer already handed out (they found their
-- user's row, ON CONFLICT DO NOTHING) leave `processed` (and `suppressed`) too.
UPDATE campaigns
SET recipients = recipients - %(repeated)s,
    invalid_lines = invalid_lines + %(repeated)s,
    processed = processed - %(handed_out)s,
    suppressed = suppressed - %(handed_out_suppressed)s,
    importing = false,
    updated_at = now()
WHERE id = %(id)s

-- name: repeated_users
-- Lines whose user id an earlier line of the same campaign already has (the first is
-- kept), and whether the pacer marked them suppressed. The user ids seen twice are found
-- by one hash aggregate (half the time of sorting every line by user id, and it runs
-- while the pacer is still fanning out); only their lines are sorted. Planned on the
-- statistics analyze_recipients took just before.
SELECT ordinal, user_id, first_line, suppressed
FROM (
    SELECT ordinal, user_id, suppressed,
           min(ordinal) OVER (PARTITION BY user_id) AS first_line
    FROM campaign_recipients
    WHERE campaign_id = %(id)s
      AND user_id IN (SELECT user_id FROM campaign_recipients
                      WHERE campaign_id = %(id)s
                      GROUP BY user_id HAVING count(*) > 1)
) lines
WHERE ordinal <> first_line
ORDER BY ordinal

-- name: delete_lines
DELETE FROM campaign_recipients WHERE campaign_id = %(id)s AND ordinal = ANY(%(ordinals)s)

-- name: analyze_recipients
-- Statistics that count the parts just committed, so the pacer's ticks are planned for
-- the campaign's real size.
ANALYZE campaign_recipients

-- name: transition
-- Moves a campaign from one of %(from_states)s to %(to_state)s. Waits for the row lock a
-- pacer tick holds, so once this commits no tick of the old state can still write rows.
UPDATE campaigns
SET state = %(to_state)s,
    started_at = CASE WHEN %(to_state)s = 'running' THEN coalesce(started_at, now())
                      ELSE started_at END,
    ended_at = CASE WHEN %(to_state)s IN ('finished', 'cancelled') THEN now() ELSE ended_at END,
    tokens = 0,
    last_tick_at = NULL,
    importing = importing AND %(to_state)s <> 'cancelled',  -- a cancel ends the import
    -- Why it is paused (NULL: an operator's pause); the guard's window restarts with it.
    paused_reason = CASE WHEN %(to_state)s = 'paused' THEN %(reason)s::text END,
    guarded_since = CASE WHEN %(to_state)s = 'running' THEN now() ELSE guarded_since END,
    updated_at = now()
WHERE id = %(id)s AND state = ANY(%(from_states)s)
RETURNING state

-- name: campaign_state
SELECT state FROM campaigns WHERE id = %(id)s

-- The moves' follow-ups on the campaign's sends run as functions of migration 0053 (the
-- console's role may not update sends itself); each statement is there, unchanged.

-- name: lock_open_rows
-- On cancel, first: the campaign's rows not yet final, locked in id order (as claims lock
-- them). A claim that committed meanwhile is seen by the statements that follow (each
-- reads the latest rows); a claim that comes later waits, then finds them expired.
SELECT * FROM mailbus_campaign_lock_open(%(id)s)

-- name: expire_unsent
-- On cancel: the campaign's pending rows the provider cannot hold end `expired` at once:
-- never tried, or tried and answered definitively every time (a 429 or 503 says "not
-- accepted"; in_doubt_since is set by any call whose outcome was not known).
SELECT * FROM mailbus_campaign_expire_unsent(%(id)s)

-- name: expire_in_doubt
-- On cancel: the campaign's rows the provider may hold (`unknown`, `sending`, or pending
-- after a call with no known outcome) expire now, by the look-up rule: the consumer looks
-- each key up before it writes `expired` (found: `accepted`), and its claim sends none of
-- them again. Due now, so that the campaign's last mail is final soon.
SELECT * FROM mailbus_campaign_expire_in_doubt(%(id)s)

-- name: hold_queued
-- On pause: the campaign's pending rows, tried or not, are held back a century (their own
-- retry time kept under it, so a Retry-After still counts after the resume), and
-- published_at NULL lets the relay publish them again once released. A pointer already on
-- Kafka is refused by the consumer's claim (not due; and the campaign is paused).
SELECT * FROM mailbus_campaign_hold(%(id)s)

-- name: release_held
-- On resume: the rows hold_queued held are due at their own time again; rows that came
-- back pending during the pause (their call was in flight) and whose pointer the claim
-- refused are handed back to the relay too.
SELECT * FROM mailbus_campaign_release(%(id)s)

-- name: open_mail
-- Whether any of the campaign's mail is not final: the campaign is not finished until
-- its last mail is (email_sends_campaign_idx).
SELECT EXISTS (SELECT 1 FROM email_sends
               WHERE campaign_id = %(id)s AND status IN ('pending', 'sending', 'unknown'))

-- name: running_ids
SELECT id FROM campaigns WHERE state = 'running' ORDER BY id

-- name: quota_lock
-- The daily quota's round: one pacer process at a time (released at commit).
SELECT pg_advisory_xact_lock(hashtext('mailbus.campaign_daily_quota'))

-- name: quota_used_today
-- Recipients every campaign handed out on today's UTC day (day_count counts `day`).
SELECT coalesce(sum(day_count), 0)
FROM campaigns
WHERE day = (now() AT TIME ZONE 'UTC')::date

-- name: lock_running
-- One pacer at a time per campaign: another pacer's tick waits for the lock, then finds
-- the campaign as the first one left it. Not SKIP LOCKED: an import commits each part by
-- updating this row, queued behind a tick's lock, and a tick that skipped the row in the
-- moment of that commit slept a whole second (once a part, most parts of an import).
SELECT template, priority, rate_per_min, window_start, window_end, daily_cap, warmup,
       checkpoint, tokens, last_tick_at, day, day_count,
       (started_at AT TIME ZONE 'UTC')::date, now(), recipients - processed, recipients,
       importing
FROM campaigns
WHERE id = %(id)s AND state = 'running'
FOR UPDATE

-- name: tick_settings
-- The fan-out must walk the recipients in ordinal order from the checkpoint (an index scan
-- that stops after the limit). On statistics that have not yet seen a fresh import the
-- planner chose a bitmap scan of the whole campaign and a sort: every tick read every
-- recipient. JIT: the cost estimate crosses jit_above_cost, compiling takes longer than
-- it saves.
SELECT set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)

-- name: fan_out
-- The next %(limit)s recipients after the checkpoint: the suppressed are marked, the others
-- become email_sends rows (key campaign-{id}-user-{user_id}), with an unsubscribe link in
-- their variables when links are on. Returns the recipients
-- handed out, the last ordinal among them, how many were suppressed, how many rows were new.
WITH batch AS (
    SELECT r.ordinal, r.user_id, r.email, r.variables,
           EXISTS (SELECT 1 FROM email_suppressions x
                   WHERE lower(x.address) = lower(r.email)) AS suppressed
    FROM campaign_recipients r
    WHERE r.campaign_id = %(id)s AND r.ordinal > %(after)s
    ORDER BY r.ordinal
    LIMIT %(limit)s
), marked AS (
    -- One index scan for the batch's suppressed lines, whatever the statistics say. As a
    -- join, on statistics that had not seen the first part of an import (the pacer starts
    -- while the import runs), it was planned as a nested loop of the batch's range against
    -- the batch: 20,000 x 20,000 comparisons, a 25 s tick.
    UPDATE campaign_recipients r SET suppressed = true
    WHERE r.campaign_id = %(id)s
      AND r.ordinal = ANY (ARRAY(SELECT ordinal FROM batch WHERE suppressed))
    RETURNING 1
), inserted AS (
    INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, priority,
                             campaign_id, expires_at)
    SELECT 'campaign-' || %(id)s::bigint || '-user-' || b.user_id, b.email, %(template)s,
           CASE WHEN u.url IS NULL THEN b.variables
                ELSE b.variables || jsonb_build_object(
                    'unsubscribe_url', u.url,
                    'headers', jsonb_build_object(
                        'List-Unsubscribe', '<' || u.url || '>',
                        'List-Unsubscribe-Post', 'List-Unsubscribe=One-Click'))
           END,
           %(priority)s, %(id)s,
           -- the template's policy expiry, from now (NULL: never expires)
           now() + %(expire_after_s)s::float8 * interval '1 second'
    FROM batch b
    -- The recipient's unsubscribe link (campaigns/unsubscribe.py: the same token, with
    -- HMAC-SHA256 spelled as sha256(outer || sha256(inner || payload))); NULL when
    -- %(unsub_base)s is NULL (no secret configured: no links). The WHERE on the parameter
    -- alone is a one-time filter: without links neither subquery runs per row (computing
    -- the unused payload anyway cost a tenth or more of the fan-out's speed).
    LEFT JOIN LATERAL (
        SELECT convert_to('1:' || %(id)s::bigint || ':' || extract(epoch FROM now())::bigint
                          || ':' || lower(b.email), 'UTF8') AS payload
        WHERE %(unsub_base)s::text IS NOT NULL
        OFFSET 0
    ) m ON true
    -- URL-safe base64 by replace(), several times faster than translate() here; only the
    -- payload can be long enough for encode() to break its lines. OFFSET 0 keeps each
    -- subquery a subquery: flattened, its expression was computed at every reference
    -- (url three times, payload in each), which took a third of the fan-out's speed.
    LEFT JOIN LATERAL (
        SELECT rtrim(%(unsub_base)s::text, '/') || '/unsubscribe/'
               || replace(replace(replace(rtrim(encode(m.payload, 'base64'), '='),
                                          '+', '-'), '/', '_'), E'\n', '')
               || '.'
               || replace(replace(rtrim(encode(sha256(%(unsub_outer)s::bytea
                                                      || sha256(%(unsub_inner)s::bytea
                                                                || m.payload)),
                                               'base64'), '='), '+', '-'), '/', '_') AS url
        WHERE %(unsub_base)s::text IS NOT NULL
        OFFSET 0
    ) u ON true
    WHERE NOT b.suppressed
    ORDER BY b.ordinal
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM batch), (SELECT max(ordinal) FROM batch),
       (SELECT count(*) FROM marked), (SELECT count(*) FROM inserted)

-- name: open_rows
-- What the queue cap counts (as the enqueue helper's enqueue_bounded): an index-only scan
-- of email_sends_open_idx.
SELECT count(*) FROM email_sends WHERE status IN ('pending', 'sending', 'unknown')

-- name: record_tick
UPDATE campaigns
SET checkpoint = %(checkpoint)s,
    processed = processed + %(handed_out)s,
    created_rows = created_rows + %(created)s,
    suppressed = suppressed + %(suppressed)s,
    tokens = %(tokens)s,
    last_tick_at = %(last_tick_at)s,
    day = %(day)s,
    day_count = %(day_count)s,
    state = CASE WHEN %(finished)s THEN 'finished' ELSE state END,
    ended_at = CASE WHEN %(finished)s THEN now() ELSE ended_at END,
    updated_at = now()
WHERE id = %(id)s

-- name: campaign_row
SELECT id, name, template, priority, state, rate_per_min, window_start, window_end,
       daily_cap, warmup, audience, recipients, invalid_lines, checkpoint, processed,
       created_rows, suppressed, created_at, started_at, ended_at, importing,
       imported_through, paused_reason
FROM campaigns
WHERE id = %(id)s

-- name: sends_by_status
SELECT status, count(*) FROM email_sends WHERE campaign_id = %(id)s GROUP BY status

-- name: list_campaigns
SELECT id, name, template, priority, state, rate_per_min, recipients, processed,
       created_rows, suppressed, created_at
FROM campaigns
ORDER BY id DESC
LIMIT %(limit)s

-- name: overview_campaigns
-- The campaigns `mailbus status` and /metrics show: not ended, or ended in the last day;
-- with how many recipients unsubscribed through this campaign's links.
SELECT c.id, c.name, c.state, c.recipients, c.processed, c.suppressed,
       (SELECT count(*) FROM email_suppressions x
        WHERE x.source = 'campaign:' || c.id AND x.reason = 'unsubscribed'),
       c.paused_reason
FROM campaigns c
WHERE c.ended_at IS NULL OR c.ended_at > now() - interval '1 day'
ORDER BY c.id

-- name: overview_sends
SELECT campaign_id, status, count(*)
FROM email_sends
WHERE campaign_id = ANY(%(ids)s)
GROUP BY campaign_id, status
