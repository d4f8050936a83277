-- Scheduled delivery: a row with a deliver_at later than its commit leaves at that time, not at
-- commit. NULL, or a time already past, leaves at once. The column is nullable without a default,
-- so adding it rewrites nothing.
ALTER TABLE {{.Table}} ADD COLUMN IF NOT EXISTS deliver_at timestamptz;

-- walbox_emit with a deliver_at: an overload of eight arguments, each required (pass NULL for id
-- or created_at to default them). The seven-argument function stays as it was, with its grants,
-- and calls with up to seven arguments keep resolving to it. The rest is 003_walbox_emit_reserved_headers.sql.
CREATE OR REPLACE FUNCTION {{.Schema}}.walbox_emit(
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        jsonb,
    headers        jsonb,
    id             uuid,
    created_at     timestamptz,
    deliver_at     timestamptz)
RETURNS uuid LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    msg_id   uuid := coalesce(id, pg_catalog.gen_random_uuid());
    reserved text;
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
    SELECT pg_catalog.min(k) INTO reserved FROM pg_catalog.jsonb_object_keys(headers) AS k
        WHERE pg_catalog.translate(pg_catalog.left(k, 9), 'XWALBO', 'xwalbo') = 'x-walbox-';
    IF reserved IS NOT NULL THEN
        RAISE EXCEPTION 'walbox_emit: header %: names starting with x-walbox- are reserved for walbox', pg_catalog.quote_ident(reserved)
            USING ERRCODE = 'check_violation';
    END IF;
    PERFORM pg_catalog.pg_logical_emit_message(true, {{.MessagePrefix}}, pg_catalog.json_build_object(
        'v', 1, 'id', msg_id, 'aggregate_type', aggregate_type, 'aggregate_id', aggregate_id,
        'event_type', event_type, 'payload', payload, 'headers', headers,
        'created_at', coalesce(created_at, pg_catalog.now()), 'deliver_at', deliver_at)::text);
    RETURN msg_id;
END
$$;
