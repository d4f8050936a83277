-- The sender reads due messages in deliver_at order, then message id. Many due at one instant
-- made it sort them all at each batch. An index in that order lets it read the first batch alone.
CREATE INDEX IF NOT EXISTS walbox_schedule_due_order ON {{.Schema}}.walbox_schedule (deliver_at, message_id);
DROP INDEX IF EXISTS {{.Schema}}.walbox_schedule_deliver_at;
