-- The global rate limit: one token bucket per provider, shared by every consumer process
-- of every priority. Each process takes a few tokens at a time with one UPDATE.
CREATE TABLE rate_limits (
    name       text PRIMARY KEY,
    rate       double precision NOT NULL,  -- tokens per second
    capacity   double precision NOT NULL,  -- the largest burst
    tokens     double precision NOT NULL,
    updated_at timestamptz NOT NULL
);

-- The circuit breaker of each consumer process, for `mailbus status` and alerts.
CREATE TABLE provider_health (
    process    text PRIMARY KEY,
    provider   text NOT NULL,
    state      text NOT NULL,
    changed_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
