-- The local compose stack's login roles, one per workload, each in the group role that
-- `mailbus migrate --roles` grants (schemas/sql/roles/grants.sql): run by the postgres
-- image on a fresh volume (docker-entrypoint-initdb.d). The groups are made here NOLOGIN
-- first so that the logins can join them; `migrate --roles` then grants them. Local
-- passwords only: production login roles and their Secrets are made outside the repository.
DO $$
DECLARE
    workload text;
BEGIN
    FOREACH workload IN ARRAY ARRAY['relay', 'consumer', 'intake', 'webhooks', 'operator',
                                    'console', 'retention'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_' || workload) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', 'mailbus_' || workload);
        END IF;
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailbus_' || workload || '_local') THEN
            EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L IN ROLE %I',
                           'mailbus_' || workload || '_local', workload || '-local',
                           'mailbus_' || workload);
        END IF;
    END LOOP;
END $$;
