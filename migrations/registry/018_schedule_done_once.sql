-- The sender notes a sent message in one row, not two: under the empty slot name, where a cancel
-- writes its tombstone. sent_by lists the slots whose record of the id was sent. Rows written
-- before this one, one under each slot, still count.
-- The hourly prune keeps the btree on done_at. A BRIN index does not serve it: new rows fill the
-- pages old ones left, so each range soon spans a week, and the prune read every page. The ALTER
-- goes first: its lock is the strongest. A first version of this migration built that BRIN index.
ALTER TABLE {{.Schema}}.walbox_schedule_done ADD COLUMN IF NOT EXISTS sent_by text[];
DROP INDEX IF EXISTS {{.Schema}}.walbox_schedule_done_at_brin;
CREATE INDEX IF NOT EXISTS walbox_schedule_done_at ON {{.Schema}}.walbox_schedule_done (done_at);
