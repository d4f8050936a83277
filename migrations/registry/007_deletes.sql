-- What walbox prune deleted from each outbox table, and the deletes walbox recover --accept-loss
-- accepted, beside the server's statistics of the rows deleted from it. walbox recover counts the
-- deletes the statistics see that this does not explain: rows of a gap may be among them
-- (delete-after-insert, a DELETE by hand), and recover refuses to call such a gap filled.
CREATE TABLE IF NOT EXISTS {{.Schema}}.walbox_deletes (
    table_name  text        PRIMARY KEY, -- the outbox table, schema.name
    stats_reset timestamptz,             -- the database's statistics reset time when last counted
    seen        bigint      NOT NULL,    -- the rows deleted from the table, by the statistics, then
    explained   bigint      NOT NULL,    -- of the rows the statistics count, those walbox deleted or accepted
    updated_at  timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- Whoever may write it can make a delete look like prune's, and so hide rows lost from a gap.
REVOKE ALL ON {{.Schema}}.walbox_deletes FROM PUBLIC;
