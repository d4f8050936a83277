-- The schedule: messages the relay read from the WAL that are due later than their commit. The relay
-- records each here, in full, before its slot moves past the row. It sends each once due, and deletes
-- it after the broker's confirm. Each slot (a shard, a second relay) has a schedule of its own.
CREATE TABLE IF NOT EXISTS {{.Schema}}.walbox_schedule (
    slot_name      text        NOT NULL,
    message_id     text        NOT NULL,   -- the AMQP message id: the id column, or a position id
    deliver_at     timestamptz NOT NULL,
    id             uuid        NOT NULL,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        bytea       NOT NULL,
    headers        text        NOT NULL,   -- a JSON object, as the relay decoded it
    created_at     timestamptz,
    amqp_id        text        NOT NULL,   -- Message.MessageID: "" when the id is the uuid
    routing_key    text        NOT NULL,
    exchange       text        NOT NULL,
    recorded_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (slot_name, message_id)
);
CREATE INDEX IF NOT EXISTS walbox_schedule_due ON {{.Schema}}.walbox_schedule (slot_name, deliver_at);
CREATE INDEX IF NOT EXISTS walbox_schedule_message ON {{.Schema}}.walbox_schedule (message_id);

-- What became of a scheduled message that left the schedule: sent by a slot's relay, or cancelled
-- (slot_name ''). A cancel of a message not yet recorded is such a row too. The relay checks it
-- before recording and before sending. The relay deletes rows older than a week.
CREATE TABLE IF NOT EXISTS {{.Schema}}.walbox_schedule_done (
    message_id text        NOT NULL,
    slot_name  text        NOT NULL,   -- the slot whose record was sent; '' for a cancel
    state      text        NOT NULL CHECK (state IN ('sent', 'cancelled')),
    done_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (message_id, slot_name)
);
CREATE INDEX IF NOT EXISTS walbox_schedule_done_at ON {{.Schema}}.walbox_schedule_done (done_at);

REVOKE ALL ON {{.Schema}}.walbox_schedule, {{.Schema}}.walbox_schedule_done FROM PUBLIC;

-- walbox_cancel cancels a scheduled message in the caller's transaction. True: it was still waiting
-- and will never be sent. False: it was sent already. A message walbox has not read from the WAL yet
-- is cancelled through a tombstone, and that is true too. It runs with its owner's rights, so a
-- producer needs no rights on the schedule's tables.
CREATE OR REPLACE FUNCTION {{.Schema}}.walbox_cancel(message_id text)
RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    waiting boolean;
BEGIN
    IF message_id IS NULL THEN
        RAISE EXCEPTION 'walbox_cancel: message_id must not be NULL' USING ERRCODE = 'not_null_violation';
    END IF;
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

CREATE OR REPLACE FUNCTION {{.Schema}}.walbox_cancel(message_id uuid)
RETURNS boolean LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT {{.Schema}}.walbox_cancel(CAST(message_id AS pg_catalog.text))
$$;
