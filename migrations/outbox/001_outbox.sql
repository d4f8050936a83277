-- The outbox table and the publication walbox reads it through. The publication publishes inserts
-- only, so rows may be deleted (even in the transaction that inserted them) without a trace in the
-- stream.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    id             uuid        PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        jsonb       NOT NULL,
    headers        jsonb       NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT pg_catalog.now()
);

{{if .CreatePublication -}}
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = {{.PublicationLiteral}}) THEN
        CREATE PUBLICATION {{.Publication}} FOR TABLE {{.Table}} WITH (publish = 'insert');
    END IF;
END
$$;
{{- end}}
