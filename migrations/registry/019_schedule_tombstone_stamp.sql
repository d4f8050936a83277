-- A tombstone stops the record of its message by a slot that has not read the message yet. So the
-- prune deletes it only once every slot has read past it, not by age alone. The prune stamps each
-- tombstone a week old with the WAL's insert position and the next transaction id. A message
-- committed before its cancel lies before both. The tombstone goes once each slot in walbox_slots
-- passed the stamp, by walbox's record and by the server's slot. walbox_cancel is unchanged: the
-- stamp is the prune's, which the relay's role runs and may write.
ALTER TABLE {{.Schema}}.walbox_schedule_done
    ADD COLUMN IF NOT EXISTS lsn      pg_lsn,  -- the WAL's insert position at the stamp
    ADD COLUMN IF NOT EXISTS next_xid xid8;    -- the first transaction id not assigned then
