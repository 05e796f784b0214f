-- name: unsubscribe
-- A recipient's unsubscribe: the address joins email_suppressions unless some entry,
-- whatever its case, is already there (an earlier unsubscribe, a bounce, a manual entry
-- keep their reason). Returns one row when the address was added.
INSERT INTO email_suppressions (address, reason, source)
SELECT lower(%(address)s), 'unsubscribed', %(source)s
WHERE NOT EXISTS (
    SELECT 1 FROM email_suppressions WHERE lower(address) = lower(%(address)s)
)
ON CONFLICT (address) DO NOTHING
RETURNING address
