// Package inspect reads what walbox needs to know about PostgreSQL, in one place:
//   - the server's settings;
//   - the publication and the tables it covers as they are now;
//   - the catalog columns of every outbox table;
//   - the replication slot.
//
// `walbox run` reads it here, at the start of every session and while it streams. So do `walbox
// doctor`, `walbox status` and the metrics poller. They judge it with the same functions
// (Coverage.Err, CheckTable, Slot.Usable), so they cannot disagree. See docs/architecture.md for
// the packages that read it.
//
// Everything is read over an ordinary connection from the catalogs, which every role may read. A
// relay role with nothing but LOGIN REPLICATION sees what a superuser sees.
package inspect
