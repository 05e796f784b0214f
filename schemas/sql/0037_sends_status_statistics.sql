-- The console's overview estimates the settled rows of each priority and status instead of
-- counting them (docs/guides/console.md#the-overview-at-any-size): the planner's row
-- estimate, which for `priority = … AND status = …` is only as good as its statistics on
-- the pair. Without this object it multiplies the two columns' frequencies as if they
-- were unrelated (campaign mail is p2 and mostly accepted: they are not). ANALYZE and
-- autovacuum keep it fresh. CREATE STATISTICS takes SHARE UPDATE EXCLUSIVE: enqueues,
-- claims and updates go on; ANALYZE reads a sample (30,000 rows), not the table.
CREATE STATISTICS IF NOT EXISTS email_sends_priority_status (mcv)
    ON priority, status FROM email_sends;
ANALYZE email_sends;
