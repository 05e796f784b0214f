-- Recovery pacing (consumer/core/recovery.py): one row per provider, shared by every
-- consumer process. `started_at` is when a breaker last closed after an outage (the ramp's
-- start); `tokens`/`updated_at` are the token bucket of the capped sends, refilled at the
-- ramp's current rate; while `p0_waiting_until` is in the future a P0 send found the bucket
-- empty, and only P0 sends are granted tokens.
CREATE TABLE IF NOT EXISTS recovery_pacing (
    provider         text        PRIMARY KEY,
    started_at       timestamptz NULL,
    tokens           float8      NOT NULL DEFAULT 0,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    p0_waiting_until timestamptz NULL
);
