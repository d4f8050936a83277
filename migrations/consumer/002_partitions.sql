-- What a consumer with partitions keeps beside its processed-messages table, in the same schema.
-- Members and leases spread the partitions over processes; holds keep an aggregate's messages
-- behind its failing one. Times come from the database's clock alone.
CREATE TABLE IF NOT EXISTS {{.Schema}}.walbox_consumer_members (
    consumer   text        NOT NULL,
    member     text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (consumer, member)
);

-- A partition's lease: holder may consume it until expires_at. An empty holder is a free lease.
CREATE TABLE IF NOT EXISTS {{.Schema}}.walbox_consumer_leases (
    consumer   text        NOT NULL,
    partition  int         NOT NULL,
    holder     text        NOT NULL DEFAULT '',
    expires_at timestamptz NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (consumer, partition)
);

-- An aggregate whose first held message failed. Its later messages wait in walbox_held_messages.
-- failed: the first one failed for good and waits for walbox_release. skip_message: release
-- discards that message instead of handling it.
CREATE TABLE IF NOT EXISTS {{.Schema}}.walbox_consumer_holds (
    consumer     text        NOT NULL,
    aggregate_id text        NOT NULL,
    partition    int         NOT NULL,
    attempts     int         NOT NULL,
    retry_at     timestamptz NOT NULL,
    failed       boolean     NOT NULL DEFAULT false,
    skip_message text,
    error        text        NOT NULL DEFAULT '',
    held_since   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (consumer, aggregate_id)
);

-- The messages a hold keeps, in the order they arrived; the first is the one that failed.
CREATE TABLE IF NOT EXISTS {{.Schema}}.walbox_held_messages (
    consumer     text        NOT NULL,
    seq          bigint      GENERATED ALWAYS AS IDENTITY,
    aggregate_id text        NOT NULL,
    partition    int         NOT NULL,
    message_id   text        NOT NULL,
    type         text        NOT NULL,
    routing_key  text        NOT NULL,
    exchange     text        NOT NULL,
    content_type text        NOT NULL,
    headers      jsonb       NOT NULL,
    body         bytea       NOT NULL,
    sent_at      timestamptz,
    held_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (consumer, seq),
    UNIQUE (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS walbox_held_messages_aggregate
    ON {{.Schema}}.walbox_held_messages (consumer, aggregate_id, seq);

-- walbox_release lets a held aggregate go on: its first message gets new attempts, or with skip
-- it is discarded unhandled. It returns false when the aggregate holds nothing.
CREATE OR REPLACE FUNCTION {{.Schema}}.walbox_release(consumer text, aggregate_id text, skip boolean DEFAULT false)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH released AS (
        UPDATE {{.Schema}}.walbox_consumer_holds h
        SET attempts = 0, failed = false, retry_at = pg_catalog.now(),
            skip_message = CASE WHEN $3 THEN (
                SELECT m.message_id FROM {{.Schema}}.walbox_held_messages m
                WHERE m.consumer = h.consumer AND m.aggregate_id = h.aggregate_id
                ORDER BY m.seq LIMIT 1) END
        WHERE h.consumer = $1 AND h.aggregate_id = $2
        RETURNING 1
    )
    SELECT pg_catalog.count(*) > 0 FROM released
$$;
