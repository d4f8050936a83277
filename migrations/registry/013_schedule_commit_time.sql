-- A scheduled message keeps its transaction's commit time, for the header x-walbox-commit-time.
ALTER TABLE {{.Schema}}.walbox_schedule ADD COLUMN IF NOT EXISTS commit_time timestamptz;
