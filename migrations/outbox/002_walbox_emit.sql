-- walbox_emit writes an outbox message without a row: one transactional logical decoding message,
-- decoded when (and only if) the calling transaction commits, which walbox relays exactly as it
-- relays a row of the table. Its checks are the table's constraints, plus the ones the relay
-- would otherwise park a row for: an error here fails the call, not the message later.
--
-- The content is versioned JSON: {"v": 1, "id", "aggregate_type", "aggregate_id", "event_type",
-- "payload", "headers", "created_at"}. id and created_at may be given (the Go producer gives its
-- time-ordered ids); they default like the table's columns.
CREATE OR REPLACE FUNCTION {{.Schema}}.walbox_emit(
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        jsonb,
    headers        jsonb       DEFAULT '{}',
    id             uuid        DEFAULT NULL,
    created_at     timestamptz DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    msg_id uuid := coalesce(id, pg_catalog.gen_random_uuid());
BEGIN
    IF aggregate_type IS NULL OR aggregate_id IS NULL OR event_type IS NULL OR payload IS NULL OR headers IS NULL THEN
        RAISE EXCEPTION 'walbox_emit: aggregate_type, aggregate_id, event_type, payload and headers must not be NULL'
            USING ERRCODE = 'not_null_violation';
    END IF;
    IF event_type = '' OR pg_catalog.octet_length(event_type) > 255 THEN
        RAISE EXCEPTION 'walbox_emit: event_type must be 1 to 255 bytes, is %', pg_catalog.octet_length(event_type)
            USING ERRCODE = 'check_violation';
    END IF;
    IF pg_catalog.jsonb_typeof(headers) <> 'object' THEN
        RAISE EXCEPTION 'walbox_emit: headers must be a JSON object, is %', pg_catalog.jsonb_typeof(headers)
            USING ERRCODE = 'check_violation';
    END IF;
    PERFORM pg_catalog.pg_logical_emit_message(true, {{.MessagePrefix}}, pg_catalog.json_build_object(
        'v', 1, 'id', msg_id, 'aggregate_type', aggregate_type, 'aggregate_id', aggregate_id,
        'event_type', event_type, 'payload', payload, 'headers', headers,
        'created_at', coalesce(created_at, pg_catalog.now()))::text);
    RETURN msg_id;
END
$$;
