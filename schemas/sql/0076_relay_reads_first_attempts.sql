-- The relay's pointer to a row never claimed names the row's template in a Kafka header
-- (mailbus/schemas/pointer_headers.py), so a consumer claims its first attempt as it loads
-- it (docs/design.md, "Claimed as it is loaded"). The relay's claim (relay/queries.sql)
-- reads `template` and `first_tried_at` for it: granted here too, not only by
-- `migrate --roles` (schemas/sql/roles/grants.sql), so a database upgraded by a plain
-- `mailbus migrate` does not deny the new relay its claim. Neither is an address or a
-- payload. Lock level: GRANT takes none on the table's rows.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_relay') THEN
        GRANT SELECT (template, first_tried_at) ON email_sends TO mailbus_relay;
    END IF;
END $$;
