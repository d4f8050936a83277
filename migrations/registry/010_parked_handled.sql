-- The entries of a park stream that walbox parked replayed or discarded. A stream is append-only:
-- walbox parked lists an entry until it is recorded here. A replay into the stream is recorded as
-- 'replaying' with its publishing id before it is sent, and as 'replayed' once confirmed. The
-- broker drops a second send with that id: a replay killed in between is stored once.
CREATE TABLE IF NOT EXISTS {{.Schema}}.walbox_parked_handled (
    park_stream   text        NOT NULL, -- the park stream, <stream>.parked
    park_offset   bigint      NOT NULL, -- the entry's offset in it
    message_id    text        NOT NULL,
    action        text        NOT NULL CHECK (action IN ('replaying', 'replayed', 'parked again', 'discarded')),
    publishing_id bigint,               -- the replay's publishing id in the stream
    handled_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (park_stream, park_offset)
);

-- Whoever may write it can hide a parked row from walbox parked list.
REVOKE ALL ON {{.Schema}}.walbox_parked_handled FROM PUBLIC;
