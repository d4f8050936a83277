package schedule

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/wire"
)

// Querier is a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Summary is the schedule as walbox status shows it: every slot's messages.
type Summary struct {
	Waiting int64     // messages in the schedule
	Overdue int64     // of those, due already: sent soon, or their relay is not running
	NextDue time.Time // the earliest deliver_at; zero when none waits
}

// ReadSummary reads the schedule in schema. A schedule not migrated yet reads as empty, with
// Missing true.
func ReadSummary(ctx context.Context, q Querier, schema string) (s Summary, missing bool, err error) {
	t := tablesIn(schema)
	var exists bool
	if err := q.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1::pg_catalog.text) IS NOT NULL", t.schedule).Scan(&exists); err != nil {
		return s, false, fmt.Errorf("look up %s: %w", t.schedule, err)
	}
	if !exists {
		return s, true, nil
	}
	var next pgtype.Timestamptz
	err = q.QueryRow(ctx, "SELECT pg_catalog.count(*), pg_catalog.count(*) FILTER (WHERE deliver_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()),"+
		" pg_catalog.min(deliver_at) FROM "+t.schedule).Scan(&s.Waiting, &s.Overdue, &next)
	if err != nil {
		return s, false, fmt.Errorf("read %s: %w", t.schedule, err)
	}
	if next.Valid {
		s.NextDue = next.Time.UTC()
	}
	return s, false, nil
}

// tables names the schedule's tables in one schema, quoted.
type tables struct {
	schedule, done, slots string
}

func tablesIn(schema string) tables {
	return tables{
		schedule: pgx.Identifier{schema, migrations.ScheduleTable}.Sanitize(),
		done:     pgx.Identifier{schema, migrations.ScheduleDoneTable}.Sanitize(),
		slots:    pgx.Identifier{schema, "walbox_slots"}.Sanitize(),
	}
}

// columns are the schedule's columns of a message, in the order of the arrays record sends.
const columns = "message_id, deliver_at, id, aggregate_type, aggregate_id, event_type, payload, headers, created_at, amqp_id, routing_key, exchange, commit_time"

// recordSQL inserts a batch for the slot $1. It skips messages already recorded (a replay). It skips
// those with a done row: a cancel recorded first, or a replay of a message this slot sent. A sent
// message is noted under the empty slot name, sent_by naming the slot; before migration 018, under
// the slot. Without sentBy, for a schema before 018, the statement reads sent_by only if it exists.
func (t tables) recordSQL(sentBy bool) string {
	arrays := []string{"text", "timestamptz", "uuid", "text", "text", "text", "bytea", "text", "timestamptz", "text", "text", "text", "timestamptz"}
	from := ""
	for i, typ := range arrays {
		if i > 0 {
			from += ", "
		}
		from += fmt.Sprintf("pg_catalog.unnest($%d::pg_catalog.%s[])", i+2, typ)
	}
	// Without the column, sent_by is read from the row as JSON. A session begun before walbox migrate
	// then skips what this slot sent since, and only that.
	sent := " OR (pg_catalog.to_jsonb(d) OPERATOR(pg_catalog.->) 'sent_by') OPERATOR(pg_catalog.@>) pg_catalog.jsonb_build_array($1::pg_catalog.text)"
	if sentBy {
		sent = " OR $1::pg_catalog.text OPERATOR(pg_catalog.=) ANY (d.sent_by)"
	}
	return "INSERT INTO " + t.schedule + " (slot_name, " + columns + ") SELECT $1::pg_catalog.text, " + columns +
		" FROM ROWS FROM (" + from + ") AS m(" + columns + ")" +
		" WHERE NOT EXISTS (SELECT 1 FROM " + t.done + " d WHERE d.message_id OPERATOR(pg_catalog.=) m.message_id" +
		" AND (d.slot_name OPERATOR(pg_catalog.=) $1::pg_catalog.text OR (d.slot_name OPERATOR(pg_catalog.=) ''" +
		" AND (d.state OPERATOR(pg_catalog.=) 'cancelled'" + sent + "))))" +
		" ON CONFLICT (slot_name, message_id) DO NOTHING"
}

// batch is messages to record, column by column.
type batch struct {
	ids                               []string
	deliverAt, createdAt, commitTimes []pgtype.Timestamptz
	uuids                             []uuid.UUID
	aggTypes, aggIDs, eventTypes      []string
	payloads                          [][]byte
	headers, amqpIDs, keys, exchanges []string
}

func (b *batch) add(m *wire.Message) error {
	h, err := encodeHeaders(m.Headers)
	if err != nil {
		return fmt.Errorf("message %s: headers: %w", m.AMQPMessageID(), err)
	}
	b.ids = append(b.ids, m.AMQPMessageID())
	b.deliverAt = append(b.deliverAt, pgtype.Timestamptz{Time: m.DeliverAt, Valid: true})
	b.createdAt = append(b.createdAt, pgtype.Timestamptz{Time: m.CreatedAt, Valid: !m.CreatedAt.IsZero()})
	b.commitTimes = append(b.commitTimes, pgtype.Timestamptz{Time: m.CommitTime, Valid: !m.CommitTime.IsZero()})
	b.uuids = append(b.uuids, m.ID)
	b.aggTypes, b.aggIDs, b.eventTypes = append(b.aggTypes, m.AggregateType), append(b.aggIDs, m.AggregateID), append(b.eventTypes, m.EventType)
	b.payloads = append(b.payloads, m.Payload)
	b.headers, b.amqpIDs = append(b.headers, h), append(b.amqpIDs, m.MessageID)
	b.keys, b.exchanges = append(b.keys, m.RoutingKey), append(b.exchanges, m.Exchange)
	return nil
}

func (b *batch) args(slot string) []any {
	return []any{slot, b.ids, b.deliverAt, b.uuids, b.aggTypes, b.aggIDs, b.eventTypes, b.payloads, b.headers,
		b.createdAt, b.amqpIDs, b.keys, b.exchanges, b.commitTimes}
}

// encodeHeaders writes headers as a JSON object; nil is {}.
func encodeHeaders(h map[string]any) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	return string(b), err
}

// decodeHeaders reads what encodeHeaders wrote. Numbers become what wire.HeaderNumber makes of
// their text, as the relay decodes them from a row.
func decodeHeaders(s string) (map[string]any, error) {
	if s == "" || s == "{}" {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.UseNumber()
	var h map[string]any
	if err := d.Decode(&h); err != nil {
		return nil, err
	}
	for k, v := range h {
		h[k] = numbers(v)
	}
	return h, nil
}

func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		return wire.HeaderNumber(x.String())
	case []any:
		for i := range x {
			x[i] = numbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = numbers(x[k])
		}
	}
	return v
}

// noteSQL notes the sent messages: the slot $1[i] sent the id $2[i]. Each id is noted once, under
// the empty slot name, where a cancel writes its tombstone. A cancel in an older snapshot (REPEATABLE
// READ) then conflicts with it: a serialization failure. Its sent_by names the slots whose record was
// sent: a replay of one of them is not recorded again. Its done_at is the last sending: the prune keeps
// it a week from then. The ids go in order, so two relays that send one id at once never deadlock.
func (t tables) noteSQL() string {
	return "INSERT INTO " + t.done + " AS d (slot_name, message_id, state, sent_by) SELECT '', k.message_id, 'sent', pg_catalog.array_agg(k.slot_name)" +
		" FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[])) AS k(slot_name, message_id)" +
		" GROUP BY k.message_id ORDER BY k.message_id" +
		" ON CONFLICT (message_id, slot_name) DO UPDATE SET sent_by = pg_catalog.array_cat(d.sent_by, excluded.sent_by), done_at = excluded.done_at" +
		" WHERE d.state OPERATOR(pg_catalog.=) 'sent' AND NOT COALESCE(d.sent_by, '{}') OPERATOR(pg_catalog.@>) excluded.sent_by"
}

// stampSQL stamps the tombstones older than $1 seconds that have none yet. The stamp is the WAL's
// insert position and the snapshot's xmax: every transaction below it had ended. A message committed
// before its cancel lies before both: its commit record, and the ids of its transaction.
func (t tables) stampSQL() string {
	return "UPDATE " + t.done + " d SET lsn = pg_catalog.pg_current_wal_insert_lsn(), next_xid = pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())" +
		" WHERE d.done_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) pg_catalog.make_interval(secs => $1::pg_catalog.float8))" +
		" AND d.state OPERATOR(pg_catalog.=) 'cancelled' AND d.lsn IS NULL"
}

// pruneSQL deletes the done rows older than $1 seconds. The index on done_at finds them. A sent note
// goes by age alone. A tombstone goes once stampSQL stamped it and each slot in walbox_slots passed
// the stamp. Until then, a slot may still read the cancelled message, and record it. A slot passed:
//   - when its record is of this server (a restore's is not);
//   - when walbox recorded a position at or past the stamp's;
//   - when the record's xmin horizon is at or past the stamp's transaction id. Else a recover, which
//     republishes the rows after the horizon, would hand the message to the schedule again;
//   - when the server's slot, if it holds one by that name, has its restart_lsn at or past the
//     stamp. A crash takes the slot back to it, not to confirmed_flush_lsn.
//
// A slot on a standby (--replication-url), or lost, is judged by its record. A retired slot has none.
// The slots are read once, not at each row.
func (t tables) pruneSQL() string {
	return "WITH r AS MATERIALIZED (SELECT r.system_identifier OPERATOR(pg_catalog.=) (SELECT c.system_identifier::pg_catalog.text" +
		" FROM pg_catalog.pg_control_system() c) AS ours, r.confirmed_lsn, r.confirmed_xmin, p.slot_name IS NOT NULL AS here, p.restart_lsn" +
		" FROM " + t.slots + " r LEFT JOIN pg_catalog.pg_replication_slots p ON p.slot_name::pg_catalog.text OPERATOR(pg_catalog.=) r.slot_name)" +
		" DELETE FROM " + t.done + " d WHERE d.done_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) " +
		"pg_catalog.make_interval(secs => $1::pg_catalog.float8)) AND NOT EXISTS (SELECT 1 FROM " + t.schedule +
		" s WHERE s.message_id OPERATOR(pg_catalog.=) d.message_id)" +
		" AND (d.state OPERATOR(pg_catalog.=) 'sent' OR (d.lsn IS NOT NULL AND NOT EXISTS (SELECT 1 FROM r" +
		" WHERE (r.ours AND r.confirmed_lsn OPERATOR(pg_catalog.>=) d.lsn AND r.confirmed_xmin OPERATOR(pg_catalog.>=) d.next_xid" +
		" AND (NOT r.here OR r.restart_lsn OPERATOR(pg_catalog.>=) d.lsn)) IS NOT TRUE)))"
}

// due is a message of the schedule that is due, as the sender read it.
type due struct {
	slot     string
	row      pgtype.TID // its row: locked, so it stays there until the transaction ends
	msg      wire.Message
	lateness time.Duration // by the database's clock, when it was read
	held     bool          // an open cancel holds its lock: it waits for a later turn
}

// dueSQL locks up to $2 due messages of the slot $1, oldest due first, with each row's ctid. Rows
// of a slot walbox no longer records (retired by walbox reshard --retire) are any relay's to send.
// Due means by now(), the transaction's start: never later than the clock. The index on deliver_at
// serves it.
//
// Each row also says whether a cancel holds its lock, of class $3. The outer query tries that lock
// only on rows already locked. It takes each free lock and drops it at once, so a batch fills no
// lock table. A later cancel waits on the row's lock instead, and then finds the message sent.
func (t tables) dueSQL() string {
	return "SELECT d.slot_name, d.ctid, " + dueColumns("d.") + ", d.late, NOT (CASE WHEN pg_catalog.pg_try_advisory_lock($3::pg_catalog.int4, pg_catalog.hashtext(d.message_id))" +
		" THEN pg_catalog.pg_advisory_unlock($3::pg_catalog.int4, pg_catalog.hashtext(d.message_id)) ELSE false END) FROM (" +
		"SELECT s.ctid, slot_name, " + columns + ", pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) deliver_at AS late FROM " + t.schedule + " s" +
		" WHERE s.deliver_at OPERATOR(pg_catalog.<=) pg_catalog.now()" +
		" AND (s.slot_name OPERATOR(pg_catalog.=) $1::pg_catalog.text OR NOT EXISTS (SELECT 1 FROM " + t.slots +
		" r WHERE r.slot_name OPERATOR(pg_catalog.=) s.slot_name))" +
		" ORDER BY s.deliver_at, s.message_id LIMIT $2 FOR UPDATE OF s SKIP LOCKED) d"
}

// dueColumns is columns, each qualified by prefix.
func dueColumns(prefix string) string {
	cs := strings.Split(columns, ", ")
	for i := range cs {
		cs[i] = prefix + cs[i]
	}
	return strings.Join(cs, ", ")
}

// readDue reads the rows of dueSQL.
func readDue(rows pgx.Rows) ([]due, error) {
	defer rows.Close()
	var out []due
	for rows.Next() {
		var d due
		var id, headers string
		var created, commit pgtype.Timestamptz
		var late pgtype.Interval
		m := &d.msg
		if err := rows.Scan(&d.slot, &d.row, &id, &m.DeliverAt, &m.ID, &m.AggregateType, &m.AggregateID, &m.EventType, &m.Payload,
			&headers, &created, &m.MessageID, &m.RoutingKey, &m.Exchange, &commit, &late, &d.held); err != nil {
			return nil, fmt.Errorf("read the schedule: %w", err)
		}
		h, err := decodeHeaders(headers)
		if err != nil {
			return nil, fmt.Errorf("read the schedule: message %s: headers: %w", id, err)
		}
		m.Headers = h
		if created.Valid {
			m.CreatedAt = created.Time.UTC()
		}
		if commit.Valid {
			m.CommitTime = commit.Time.UTC()
		}
		m.DeliverAt = m.DeliverAt.UTC()
		d.lateness = time.Duration(late.Microseconds)*time.Microsecond + time.Duration(late.Days)*24*time.Hour
		out = append(out, d)
	}
	// A subquery's order is kept in practice, not promised; an outer sort in SQL would cost a plan node.
	slices.SortStableFunc(out, func(a, b due) int { return a.msg.DeliverAt.Compare(b.msg.DeliverAt) })
	return out, rows.Err()
}

// earliest returns the earliest deliver_at of b.
func (b *batch) earliest() time.Time {
	var t time.Time
	for _, d := range b.deliverAt {
		if t.IsZero() || d.Time.Before(t) {
			t = d.Time
		}
	}
	return t
}
