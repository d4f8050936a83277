-- Why walbox run last stopped on a slot, where only `walbox recover` gets past: rows the slot can
-- never deliver (an outbox column renamed in the WAL) or never decoded (the publication dropped or
-- changed). The next walbox run, walbox doctor, walbox status and walbox recover all read it here,
-- so every process agrees on the stop. walbox recover clears it when it replaces the slot.
ALTER TABLE {{.Schema}}.walbox_slots
    ADD COLUMN IF NOT EXISTS stop_reason text,
    ADD COLUMN IF NOT EXISTS stop_lsn    pg_lsn,
    ADD COLUMN IF NOT EXISTS stopped_at  timestamptz;

-- Records a stop for a slot that has none yet (the first stop is the one that counts: nothing after
-- its position was delivered), and returns the recorded reason.
CREATE OR REPLACE FUNCTION {{.Schema}}.walbox_slot_stop(p_slot text, p_reason text, p_lsn pg_lsn)
RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    UPDATE {{.Schema}}.walbox_slots
       SET stop_lsn    = CASE WHEN stop_reason IS NULL THEN p_lsn ELSE stop_lsn END,
           stopped_at  = CASE WHEN stop_reason IS NULL THEN pg_catalog.now() ELSE stopped_at END,
           stop_reason = coalesce(stop_reason, p_reason)
     WHERE slot_name = p_slot
    RETURNING stop_reason
$$;

-- Only the relay's role may record a stop; the grant to it is made where the other registry
-- functions are granted.
REVOKE EXECUTE ON FUNCTION {{.Schema}}.walbox_slot_stop(text, text, pg_lsn) FROM PUBLIC;
