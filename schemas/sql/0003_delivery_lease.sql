-- A `sending` row is owned by whoever holds lease_token until lease_until; every update
-- that settles the call is guarded by the token, so a consumer whose lease was taken
-- over can never overwrite the new owner's outcome.
ALTER TABLE email_sends ADD COLUMN lease_token uuid NULL;
