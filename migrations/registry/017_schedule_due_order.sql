-- The sender reads due messages in deliver_at order, then message id. Many due at one instant
-- made it sort them all at each batch. An index in that order lets it read the first batch alone.
-- The old index goes first: its ACCESS EXCLUSIVE lock is the strongest, taken before any other.
-- Created first, the new index held SHARE, and a sender's delete then deadlocked with the drop.
DROP INDEX IF EXISTS {{.Schema}}.walbox_schedule_deliver_at;
CREATE INDEX IF NOT EXISTS walbox_schedule_due_order ON {{.Schema}}.walbox_schedule (deliver_at, message_id);
