-- The sender notes a sent message in one row, not two: under the empty slot name, where a cancel
-- writes its tombstone. sent_by lists the slots whose record of the id was sent. Rows written
-- before this one, one under each slot, still count.
-- done_at is only read by the weekly prune. Rows arrive in done_at order, so a BRIN index serves it,
-- and costs the sender next to nothing. The old index goes first: its lock is the strongest.
DROP INDEX IF EXISTS {{.Schema}}.walbox_schedule_done_at;
ALTER TABLE {{.Schema}}.walbox_schedule_done ADD COLUMN IF NOT EXISTS sent_by text[];
CREATE INDEX IF NOT EXISTS walbox_schedule_done_at_brin ON {{.Schema}}.walbox_schedule_done USING brin (done_at);
