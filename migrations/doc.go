// Package migrations holds the SQL walbox needs in the database, embedded in the binary, and applies
// it idempotently: every migration runs at most once per target and is recorded with its version in
// the table walbox_migrations, in the schema of the table it migrates. Concurrent appliers are
// serialised by an advisory lock. Every statement names walbox's objects with their schema and the
// built-ins with pg_catalog, so it runs alike on a connection with any search_path.
//
// The outbox migrations create the outbox table and the publication walbox reads it through. The
// publication must exist before the replication slot: pgoutput looks publications up as of the WAL
// it decodes, so a slot created first fails with "publication does not exist".
package migrations
