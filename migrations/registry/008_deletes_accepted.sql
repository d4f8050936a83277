-- The deletes walbox recover --accept-loss accepted, per slot: an accepted loss is the loss of the
-- slot recovered only. Another slot relaying the same table (a shard, a second relay) may have the
-- deleted rows in its own gap, and its recovery must still see them. explained keeps prune's
-- deletes, which no slot's gap holds.
ALTER TABLE {{.Schema}}.walbox_deletes
    ADD COLUMN IF NOT EXISTS accepted jsonb NOT NULL DEFAULT '{}'::jsonb; -- slot name: deletes accepted for it
