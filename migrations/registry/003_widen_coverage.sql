-- Widens the coverage recorded for a slot to one that holds everything it held and more (an outbox
-- table mapped and added to the publication since): the caller judged that, and the update takes
-- effect only if the record is still the one it judged.
CREATE OR REPLACE FUNCTION {{.Schema}}.walbox_slot_widen_coverage(p_slot text, p_recorded text, p_coverage text)
RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    UPDATE {{.Schema}}.walbox_slots
       SET coverage = CASE WHEN coverage = p_recorded THEN p_coverage ELSE coverage END
     WHERE slot_name = p_slot
    RETURNING coverage
$$;
