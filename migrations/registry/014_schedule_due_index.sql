-- The relay finds due messages by deliver_at alone: its own slot's, and those of slots retired by
-- walbox reshard --retire. So an index on deliver_at keeps that read small however many wait.
CREATE INDEX IF NOT EXISTS walbox_schedule_deliver_at ON {{.Schema}}.walbox_schedule (deliver_at);
