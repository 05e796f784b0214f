-- name: configure_bucket
INSERT INTO rate_limits (name, rate, capacity, tokens, updated_at)
VALUES (%(name)s, %(rate)s, %(capacity)s, %(capacity)s, clock_timestamp())
ON CONFLICT (name) DO UPDATE SET rate = excluded.rate, capacity = excluded.capacity

-- name: take_tokens
-- Refill by elapsed time, then grant up to %(want)s whole tokens (0 if less than one).
WITH bucket AS (
    SELECT name, rate,
           least(capacity, tokens + rate * extract(epoch FROM clock_timestamp() - updated_at))
               AS available
    FROM rate_limits WHERE name = %(name)s
    FOR UPDATE
), grant_ AS (
    SELECT name, rate, available,
           CASE WHEN available >= 1 THEN least(%(want)s, floor(available)) ELSE 0 END AS granted
    FROM bucket
)
UPDATE rate_limits r
SET tokens = g.available - g.granted, updated_at = clock_timestamp()
FROM grant_ g
WHERE r.name = g.name
RETURNING g.granted, g.available, g.rate

-- name: report_health
INSERT INTO provider_health (process, provider, state, changed_at, updated_at)
VALUES (%(process)s, %(provider)s, %(state)s, now(), now())
ON CONFLICT (process) DO UPDATE
SET state = excluded.state, provider = excluded.provider, updated_at = now(),
    changed_at = CASE WHEN provider_health.state = excluded.state
                      THEN provider_health.changed_at ELSE now() END
