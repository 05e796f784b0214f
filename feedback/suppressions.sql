-- Addresses are stored lower-cased and compared as lower() on both sides, so an entry
-- suppresses every capitalisation of its address.

-- name: add
-- Returns whether the address was new (xmax = 0: inserted, not updated) and its scope.
INSERT INTO email_suppressions (address, reason, source)
VALUES (lower(%(address)s), %(reason)s, %(source)s)
ON CONFLICT (address) DO UPDATE SET reason = EXCLUDED.reason, source = EXCLUDED.source
RETURNING xmax = 0, scope

-- name: remove
DELETE FROM email_suppressions WHERE lower(address) = lower(%(address)s)
RETURNING address

-- name: list
-- scope: 'all' (every mail) or 'bulk' (campaigns and bulk templates only), from the reason.
SELECT address, reason, scope, source, created_at FROM email_suppressions ORDER BY address

-- name: search
-- The console's search: entries whose address contains the text, any case (a prefix or a
-- whole address uses email_suppressions_pkey; anything else scans the list).
SELECT address, reason, scope, source, created_at FROM email_suppressions
WHERE address LIKE '%%' || lower(%(text)s) || '%%'
ORDER BY address LIMIT %(limit)s

-- name: add_batch
-- One batch of an import; addresses already on the list (or twice in the batch) are kept
-- as they are. Inserted in lower(address) order, as every writer of many suppressions
-- inserts them (feedback/events.sql, consumer/queries.sql settle): DO NOTHING too waits for
-- another transaction's uncommitted entry of the same address, and in the file's order an
-- import and a webhook batch could each wait for the other's ("deadlock detected").
-- Returns one row per address added.
INSERT INTO email_suppressions (address, reason, source)
SELECT lower(a.address), coalesce(a.reason, %(default_reason)s), %(source)s
FROM unnest(%(addresses)s::text[], %(reasons)s::text[]) AS a (address, reason)
ORDER BY lower(a.address)
ON CONFLICT (address) DO NOTHING
RETURNING address
