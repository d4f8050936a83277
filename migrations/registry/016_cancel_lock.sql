-- walbox_cancel holds a lock on the message id until its transaction ends. The relay sends no due
-- message whose lock a cancel holds: its tombstone is not visible yet, and it may commit. Without
-- it, a cancel still open when the message fell due said true for a message that left.
-- The lock is an advisory one: class 2002873442 (schedule.cancelLockClass), keyed by the id's hash.
CREATE OR REPLACE FUNCTION {{.Schema}}.walbox_cancel(message_id text)
RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    waiting boolean;
BEGIN
    IF message_id IS NULL THEN
        RAISE EXCEPTION 'walbox_cancel: message_id must not be NULL' USING ERRCODE = 'not_null_violation';
    END IF;
    -- Taken first: a relay sending the message now holds it until its commit, and this waits.
    PERFORM pg_catalog.pg_advisory_xact_lock(2002873442, pg_catalog.hashtext(walbox_cancel.message_id));
    -- A row the relay is sending is locked: this waits for its confirm and delete, then finds nothing.
    DELETE FROM {{.Schema}}.walbox_schedule s WHERE s.message_id OPERATOR(pg_catalog.=) walbox_cancel.message_id;
    waiting := FOUND;
    -- The tombstone: a record of the message not written yet is never written, nor sent.
    INSERT INTO {{.Schema}}.walbox_schedule_done (message_id, slot_name, state) VALUES (walbox_cancel.message_id, '', 'cancelled')
        ON CONFLICT ON CONSTRAINT walbox_schedule_done_pkey DO NOTHING;
    RETURN waiting OR NOT EXISTS (SELECT 1 FROM {{.Schema}}.walbox_schedule_done d
        WHERE d.message_id OPERATOR(pg_catalog.=) walbox_cancel.message_id AND d.state OPERATOR(pg_catalog.=) 'sent');
END
$$;
