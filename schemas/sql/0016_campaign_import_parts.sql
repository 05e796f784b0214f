-- Campaign audiences imported in parts (issue 10): each part of the audience is committed
-- with the position it reached, so the pacer fans out the first parts while the rest is
-- still being read, and an import that stopped (a crash, SIGKILL) goes on from there
-- (`mailbus campaign import ID`). While `importing`, the pacer never ends the campaign
-- `finished`: more recipients may come.
ALTER TABLE campaigns ADD COLUMN IF NOT EXISTS importing boolean NOT NULL DEFAULT false;
-- Every audience line (CSV line, or SQL row position) <= imported_through is in
-- campaign_recipients (or was skipped as invalid), committed with this value.
ALTER TABLE campaigns ADD COLUMN IF NOT EXISTS imported_through bigint NOT NULL DEFAULT 0;
-- A SQL audience's keyset position: the user_id of the row at imported_through, as text.
ALTER TABLE campaigns ADD COLUMN IF NOT EXISTS imported_key text NULL;
