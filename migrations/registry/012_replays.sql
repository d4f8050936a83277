-- The progress of each walbox replay, per outbox table. A replay is named by a hash of its
-- filters; running it again with the same filters resumes from here. A finished replay's rows
-- are deleted. walbox replay never moves a slot: this is all it writes.
CREATE TABLE IF NOT EXISTS {{.Schema}}.walbox_replays (
    replay_id   text        NOT NULL, -- the hash of the replay's filters
    table_name  text        NOT NULL, -- the outbox table, schema.name
    filters     text        NOT NULL, -- the filters in words, for people
    horizon     bigint      NOT NULL, -- the next transaction id (a full id) when the replay started
    snapshot    text        NOT NULL, -- the snapshot then: rows of transactions it saw ended only
    done_xid    bigint      NOT NULL DEFAULT 0,  -- the last statement confirmed whole: its transaction
    done_cmd    bigint      NOT NULL DEFAULT -1, -- and its command id within the transaction
    sent        bigint      NOT NULL DEFAULT 0,  -- rows confirmed by the broker so far
    started_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (replay_id, table_name)
);

REVOKE ALL ON {{.Schema}}.walbox_replays FROM PUBLIC;
