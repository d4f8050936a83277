-- walbox's record of the replication slots it created or streamed from. It lives in the database,
-- so it outlives every walbox process, container and pod, and reaches a physical standby with the
-- rest of the data: a slot that disappears, or comes back at a later position, is a gap walbox
-- can see, not one it silently steps over.
CREATE TABLE IF NOT EXISTS {{.Schema}}.walbox_slots (
    slot_name         text        PRIMARY KEY,
    system_identifier text        NOT NULL,   -- IDENTIFY_SYSTEM's systemid when first recorded
    timeline          integer     NOT NULL,   -- the server's timeline at the last confirm
    origin            text        NOT NULL,   -- created, adopted (found and streamed) or recovered
    created_lsn       pg_lsn,                 -- consistent point, when walbox created the slot
    confirmed_lsn     pg_lsn      NOT NULL,   -- walbox never confirms past this position
    confirmed_xmin    xid8,                   -- a transaction id no later than the oldest one that
                                              -- could commit after confirmed_lsn (for recover)
    confirmed_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    first_recorded_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- The relay's role needs only LOGIN REPLICATION: it reads the record, and changes it only through
-- the two functions below, which run with the owner's rights and can only add a slot that is not
-- recorded yet or move a recorded position forward. Resetting a record (walbox recover) takes the
-- owner's own rights.
GRANT SELECT ON {{.Schema}}.walbox_slots TO PUBLIC;

CREATE OR REPLACE FUNCTION {{.Schema}}.walbox_slot_register(
    p_slot text, p_system text, p_timeline integer, p_origin text,
    p_created pg_lsn, p_lsn pg_lsn, p_xmin xid8)
RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO {{.Schema}}.walbox_slots
        (slot_name, system_identifier, timeline, origin, created_lsn, confirmed_lsn, confirmed_xmin)
    VALUES (p_slot, p_system, p_timeline, p_origin, p_created, p_lsn, p_xmin)
    ON CONFLICT (slot_name) DO NOTHING
    RETURNING true
$$;

CREATE OR REPLACE FUNCTION {{.Schema}}.walbox_slot_confirm(
    p_slot text, p_timeline integer, p_lsn pg_lsn, p_xmin xid8)
RETURNS pg_lsn LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    UPDATE {{.Schema}}.walbox_slots
       SET confirmed_xmin = CASE WHEN p_lsn > confirmed_lsn THEN coalesce(p_xmin, confirmed_xmin) ELSE confirmed_xmin END,
           confirmed_lsn  = greatest(confirmed_lsn, p_lsn),
           timeline       = p_timeline,
           confirmed_at   = pg_catalog.now()
     WHERE slot_name = p_slot
    RETURNING confirmed_lsn
$$;
