-- name: start_recovery
-- A breaker closed after an outage: the ramp starts now, with an empty bucket.
INSERT INTO recovery_pacing (provider, started_at, tokens, updated_at)
VALUES (%(provider)s, clock_timestamp(), 0, clock_timestamp())
ON CONFLICT (provider) DO UPDATE
SET started_at = clock_timestamp(), tokens = 0, updated_at = clock_timestamp(),
    p0_waiting_until = NULL

-- name: recovery_elapsed
-- Seconds since the ramp started (NULL: never started), on the database's clock.
SELECT extract(epoch FROM clock_timestamp() - started_at)::float8
FROM recovery_pacing WHERE provider = %(provider)s

-- name: take_recovery_tokens
-- Refill by elapsed time at the ramp's current %(rate)s, then grant up to %(want)s whole
-- tokens: to a P0 send always, to others only while no P0 send is waiting. A P0 send that
-- finds the bucket empty marks P0 as waiting for a moment, so the next token is P0's.
WITH bucket AS (
    SELECT provider,
           least(%(capacity)s::float8,
                 tokens + %(rate)s::float8 * extract(epoch FROM clock_timestamp() - updated_at))
               AS available,
           coalesce(p0_waiting_until > clock_timestamp(), false) AS p0_waiting
    FROM recovery_pacing WHERE provider = %(provider)s
    FOR UPDATE
), grant_ AS (
    SELECT provider, available,
           CASE WHEN available >= 1 AND (%(p0)s OR NOT p0_waiting)
                THEN least(%(want)s, floor(available)) ELSE 0 END AS granted
    FROM bucket
)
UPDATE recovery_pacing r
SET tokens = g.available - g.granted, updated_at = clock_timestamp(),
    p0_waiting_until = CASE WHEN %(p0)s AND g.granted = 0
                            THEN clock_timestamp() + interval '1 second'
                            ELSE r.p0_waiting_until END
FROM grant_ g
WHERE r.provider = g.provider
RETURNING g.granted::int, g.available
