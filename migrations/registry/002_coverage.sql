-- What the publication covered when walbox first streamed from the slot (inspect.Coverage's
-- identity: the publication's row version and the outbox tables' places in it). A publication or
-- table changed while no walbox ran, and put right again before the next start, is a gap walbox
-- cannot see in the catalogs as they are now; it can see that they are not what it recorded.
ALTER TABLE {{.Schema}}.walbox_slots ADD COLUMN IF NOT EXISTS coverage text;

-- Records the coverage for a slot that has none yet, and returns the recorded one.
CREATE OR REPLACE FUNCTION {{.Schema}}.walbox_slot_coverage(p_slot text, p_coverage text)
RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    UPDATE {{.Schema}}.walbox_slots SET coverage = coalesce(coverage, p_coverage)
     WHERE slot_name = p_slot
    RETURNING coverage
$$;
