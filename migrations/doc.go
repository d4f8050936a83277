// Package migrations holds the SQL walbox needs in the database, embedded in the binary. It applies
// it idempotently: every migration runs at most once per target. Each is recorded with its version
// in the table walbox_migrations, in the schema of the table it migrates. Concurrent appliers are
// serialised by an advisory lock. Every statement names walbox's objects with their schema and the
// built-ins with pg_catalog. So it runs alike on a connection with any search_path. See
// docs/architecture.md for the commands that apply it.
//
// The outbox migrations create the outbox table and the publication walbox reads it through. The
// publication must exist before the replication slot. The plugin pgoutput looks publications up as
// of the WAL it decodes. So a slot created first fails with "publication does not exist".
package migrations
