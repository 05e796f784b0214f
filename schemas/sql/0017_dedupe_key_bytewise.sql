-- mailbus: locking (rebuilds email_sends' dedupe-key index under ACCESS EXCLUSIVE: enqueues wait)
-- Dedupe keys are printable ASCII (send_request.py), compared only for equality: the
-- UNIQUE index on them needs no linguistic order. Under the database's collation every
-- comparison of an index descent went through strcoll (a tenth of a campaign fan-out's
-- CPU on C.UTF-8); "C" compares bytes. Equality and every ON CONFLICT
-- (dedupe_key) are unchanged; PostgreSQL rebuilds the index (the table is not rewritten).
ALTER TABLE email_sends ALTER COLUMN dedupe_key TYPE text COLLATE "C";
