// Package inspect reads what walbox needs to know about PostgreSQL, in one place: the server's
// settings, the publication and the tables it covers as they are now, the catalog columns of every
// outbox table, and the replication slot. `walbox run` (at the start of every session and while it
// streams), `walbox doctor`, `walbox status` and the metrics poller all read it here, and judge it
// with the same functions (Coverage.Err, CheckTable, Slot.Usable), so that they cannot disagree.
//
// Everything is read over an ordinary connection from the catalogs, which every role may read: a
// relay role with nothing but LOGIN REPLICATION sees what a superuser sees.
package inspect
