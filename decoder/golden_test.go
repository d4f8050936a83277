package decoder_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/wire"
)

var update = flag.Bool("update", false, "capture the golden cases from a PostgreSQL 15 server and rewrite testdata")

// goldenCase is a scenario captured from a real server into testdata/<name>/:
// frames.txt holds the XLogData messages, want.json the events they decode to, and
// mapping.json, if present, the mappings of the decoder (a JSON array of wire.Mapping; the
// default table and mapping if absent). mapping.json is written by hand, never by -update.
type goldenCase struct {
	name string
	// setup runs before the replication slot is created; defaultSetup if empty.
	setup string
	// txs run one after another once the slot exists; each is one Exec (one transaction
	// unless it says otherwise).
	txs []string
	// timeZone is the replication session's TimeZone (UTC if empty).
	timeZone string
	// migrate applies walbox's outbox migrations after setup (they create the emit function).
	migrate bool
}

// outboxDDL is the default outbox table.
const outboxDDL = `create table outbox(
  id uuid primary key default gen_random_uuid(),
  aggregate_type text not null,
  aggregate_id text not null,
  event_type text not null,
  payload jsonb not null,
  headers jsonb not null default '{}',
  created_at timestamptz not null default now());
`

const defaultSetup = outboxDDL + `create publication walbox for table outbox with (publish = 'insert');`

const insertCols = `insert into outbox(id, aggregate_type, aggregate_id, event_type, payload, created_at) values `

var goldenCases = []goldenCase{
	{name: "basic_insert", txs: []string{
		insertCols + `('0b2c6f2e-8a51-4b6e-9d7c-3f1e2a4b5c6d', 'order', '42', 'order.created',
		  '{"order_id": 42, "total": "19.99", "lines": [{"sku": "A-1", "qty": 2}]}', '2026-11-22 07:15:24.123456+00')`,
	}},
	{name: "multi_row_transaction", txs: []string{
		`begin;
		 ` + insertCols + `('00000000-0000-4000-8000-000000000001', 'order', '1', 'order.created', '{"n": 1}', '2026-11-22 07:15:24+00');
		 ` + insertCols + `('00000000-0000-4000-8000-000000000002', 'order', '1', 'order.paid', '{"n": 2}', '2026-11-22 07:15:25+00');
		 ` + insertCols + `('00000000-0000-4000-8000-000000000003', 'invoice', '7', 'invoice.issued', '{"n": 3}', '2026-11-22 07:15:26+00');
		 commit;`,
		insertCols + `('00000000-0000-4000-8000-000000000004', 'order', '2', 'order.created', '{"n": 4}', '2026-11-22 07:15:27+00')`,
	}},
	{name: "headers", txs: []string{
		`insert into outbox(id, aggregate_type, aggregate_id, event_type, payload, headers, created_at) values
		 ('7d3f0c1a-2b4e-4f6a-8c9d-0e1f2a3b4c5d', 'order', '42', 'order.created', '{}',
		  '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "rojo=00f067aa0ba902b7",
		    "retries": 3, "ratio": 0.25, "big": 12345678901234567890, "sampled": true, "none": null,
		    "tags": ["a", 1, false], "nested": {"k": "v", "n": [1.5]}}',
		  '2026-11-22 07:15:24.5+00')`,
	}},
	{name: "null_aggregate",
		setup: defaultSetup + `alter table outbox alter column aggregate_type drop not null,
		  alter column aggregate_id drop not null, alter column headers drop not null;`,
		txs: []string{
			`insert into outbox(id, aggregate_type, aggregate_id, event_type, payload, headers, created_at) values
			 ('11111111-2222-4333-8444-555555555555', null, null, 'system.started', '{"ok": true}', null, '2026-11-22 07:15:24+00')`,
		}},
	{name: "alter_table_add_column", txs: []string{
		insertCols + `('00000000-0000-4000-8000-0000000000a1', 'order', '1', 'order.created', '{"v": 1}', '2026-11-22 07:15:24+00')`,
		`alter table outbox add column tenant text, add column priority int not null default 0`,
		`insert into outbox(id, aggregate_type, aggregate_id, event_type, payload, created_at, tenant, priority) values
		 ('00000000-0000-4000-8000-0000000000a2', 'order', '1', 'order.paid', '{"v": 2}', '2026-11-22 07:15:25+00', 'acme', 5)`,
	}},
	{name: "alter_table_drop_column", txs: []string{
		insertCols + `('00000000-0000-4000-8000-0000000000b1', 'order', '1', 'order.created', '{"v": 1}', '2026-11-22 07:15:24+00')`,
		`alter table outbox drop column aggregate_type, drop column headers`,
		`insert into outbox(id, aggregate_id, event_type, payload, created_at) values
		 ('00000000-0000-4000-8000-0000000000b2', '1', 'order.paid', '{"v": 2}', '2026-11-22 07:15:25+00')`,
	}},
	{name: "column_reorder_new_table", txs: []string{
		insertCols + `('00000000-0000-4000-8000-0000000000c1', 'order', '1', 'order.created', '{"v": 1}', '2026-11-22 07:15:24+00')`,
		`drop table outbox;
		 create table outbox(
		   payload jsonb not null, note text, event_type text not null, created_at timestamptz not null default now(),
		   headers jsonb not null default '{}', aggregate_id text not null, id uuid primary key, aggregate_type text not null);
		 alter publication walbox add table outbox;`,
		insertCols + `('00000000-0000-4000-8000-0000000000c2', 'order', '1', 'order.paid', '{"v": 2}', '2026-11-22 07:15:25+00')`,
	}},
	{name: "insert_delete_same_transaction", txs: []string{
		`begin;
		 ` + insertCols + `('00000000-0000-4000-8000-0000000000d1', 'order', '1', 'order.created', '{"v": 1}', '2026-11-22 07:15:24+00');
		 delete from outbox where id = '00000000-0000-4000-8000-0000000000d1';
		 ` + insertCols + `('00000000-0000-4000-8000-0000000000d2', 'order', '1', 'order.paid', '{"v": 2}', '2026-11-22 07:15:25+00');
		 delete from outbox;
		 commit;`,
	}},
	{name: "text_payload_not_json",
		setup: strings.Replace(defaultSetup, "payload jsonb", "payload text", 1),
		txs: []string{
			`begin;
			 ` + insertCols + `('00000000-0000-4000-8000-0000000000e1', 'order', '1', 'order.created', '{"v": 1}', '2026-11-22 07:15:24+00');
			 ` + insertCols + `('00000000-0000-4000-8000-0000000000e2', 'order', '1', 'order.created', 'not json {', '2026-11-22 07:15:25+00');
			 ` + insertCols + `('00000000-0000-4000-8000-0000000000e3', 'order', '1', 'order.created', '', '2026-11-22 07:15:26+00');
			 ` + insertCols + `('00000000-0000-4000-8000-0000000000e4', 'order', '1', 'order.created', ' [1, 2] ', '2026-11-22 07:15:27+00');
			 commit;`,
		}},
	{name: "empty_event_type", txs: []string{
		`begin;
		 ` + insertCols + `('00000000-0000-4000-8000-0000000000f1', 'order', '1', '', '{"v": 1}', '2026-11-22 07:15:24+00');
		 ` + insertCols + `('00000000-0000-4000-8000-0000000000f2', 'order', '1', 'order.paid', '{"v": 2}', '2026-11-22 07:15:25+00');
		 commit;`,
	}},
	{name: "null_required_columns",
		setup: defaultSetup + `alter table outbox alter column event_type drop not null, alter column payload drop not null;`,
		txs: []string{
			`begin;
			 ` + insertCols + `('00000000-0000-4000-8000-000000000101', 'order', '1', null, '{"v": 1}', '2026-11-22 07:15:24+00');
			 ` + insertCols + `('00000000-0000-4000-8000-000000000102', 'order', '1', 'order.paid', null, '2026-11-22 07:15:25+00');
			 commit;`,
		}},
	{name: "headers_not_object", txs: []string{
		`insert into outbox(id, aggregate_type, aggregate_id, event_type, payload, headers, created_at) values
		 ('00000000-0000-4000-8000-000000000201', 'order', '1', 'order.created', '{}', '[{"k": "v"}]', '2026-11-22 07:15:24+00'),
		 ('00000000-0000-4000-8000-000000000202', 'order', '1', 'order.created', '{}', 'null', '2026-11-22 07:15:24+00'),
		 ('00000000-0000-4000-8000-000000000203', 'order', '1', 'order.created', '{}', '"traceparent"', '2026-11-22 07:15:24+00')`,
	}},
	{name: "foreign_table",
		setup: outboxDDL + `create table orders(id int primary key, note text);
		  create publication walbox for table outbox, orders with (publish = 'insert');`,
		txs: []string{
			`begin;
			 insert into orders values (1, 'not an outbox row');
			 ` + insertCols + `('00000000-0000-4000-8000-000000000301', 'order', '1', 'order.created', '{"v": 1}', '2026-11-22 07:15:24+00');
			 commit;`,
		}},
	{name: "large_payload", txs: []string{
		insertCols + `('00000000-0000-4000-8000-000000000401', 'report', '1', 'report.generated',
		  (select jsonb_build_object('rows', jsonb_agg(jsonb_build_object('i', i, 'md5', md5(i::text)))) from generate_series(1, 2000) i),
		  '2026-11-22 07:15:24+00')`,
	}},
	{name: "unicode", txs: []string{
		`insert into outbox(id, aggregate_type, aggregate_id, event_type, payload, headers, created_at) values
		 ('00000000-0000-4000-8000-000000000501', 'commande', 'ünïcødé-🚀', 'заказ.создан',
		  '{"msg": "こんにちは 🌍", "emoji": "👍🏽", "escaped": "\u00e9\ud83d\ude00", "rtl": "שלום"}',
		  '{"note": "naïve café", "标签": "值"}', '2026-11-22 07:15:24+00')`,
	}},
	{name: "created_at_offsets", timeZone: "Asia/Kolkata", txs: []string{
		`begin;
		 ` + insertCols + `('00000000-0000-4000-8000-000000000601', 'order', '1', 'order.created', '{}', '2026-11-22 07:15:24.123456+00');
		 ` + insertCols + `('00000000-0000-4000-8000-000000000602', 'order', '1', 'order.created', '{}', '1890-06-01 12:00:00+00');
		 ` + insertCols + `('00000000-0000-4000-8000-000000000603', 'order', '1', 'order.created', '{}', '2026-01-01 00:00:00+00');
		 commit;`,
	}},
	{name: "skipped_messages",
		setup: `create type mood as enum ('happy', 'sad');
		  ` + outboxDDL + `alter table outbox add column mood mood, replica identity full;
		  create publication walbox for table outbox;
		  select pg_replication_origin_create('upstream');`,
		txs: []string{
			insertCols + `('00000000-0000-4000-8000-000000000701', 'order', '1', 'order.created',
			  (select jsonb_agg(md5(i::text)) from generate_series(1, 400) i), '2026-11-22 07:15:24+00')`,
			`update outbox set aggregate_id = '2', mood = 'happy'`,
			`delete from outbox`,
			`truncate outbox`,
			`begin;
			 select pg_logical_emit_message(true, 'walbox.test', 'hello');
			 ` + insertCols + `('00000000-0000-4000-8000-000000000702', 'order', '1', 'order.paid', '{}', '2026-11-22 07:15:25+00');
			 commit;`,
			`select pg_replication_origin_session_setup('upstream');
			 begin;
			 select pg_replication_origin_xact_setup('0/ABCDEF', '2026-11-22 07:15:26+00');
			 ` + insertCols + `('00000000-0000-4000-8000-000000000703', 'order', '1', 'order.shipped', '{}', '2026-11-22 07:15:26+00');
			 commit;`,
		}},
}

// Tables of existing applications, read through mappings (see each case's mapping.json).
const (
	// eventsDDL is a legacy outbox table with a bigint key, a per-row exchange and other column
	// names.
	eventsDDL = `create table events(
  event_id bigserial primary key, kind text not null, body jsonb not null, entity text,
  entity_id bigint, meta jsonb, occurred_at timestamptz default now(), target_exchange text);
`
	eventsInsert = `insert into events(kind, body, entity, entity_id, meta, occurred_at, target_exchange) values `

	// auditDDL has no id column: its rows get position ids.
	auditDDL = `create table audit_log(kind text not null, payload json not null, at timestamptz);
`
)

var mappedCases = []goldenCase{
	{name: "mapped_legacy_table",
		setup: eventsDDL + `create publication walbox for table events with (publish = 'insert');`,
		txs: []string{
			eventsInsert + `('order.created', '{"order_id": 42, "total": "19.99"}', 'order', 42,
			  '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}', '2026-11-22 07:15:24.123456+00', 'orders')`,
			`begin;
			 ` + eventsInsert + `('invoice.issued', '{"n": 7}', 'invoice', 9000000000000000001, null, '2026-11-22 07:15:25+00', 'billing');
			 ` + eventsInsert + `('order.paid', '{"n": 8}', 'order', null, null, null, 'orders');
			 ` + eventsInsert + `('order.paid', '{"n": 9}', null, 42, null, '2026-11-22 07:15:26+00', 'orders');
			 ` + eventsInsert + `('order.paid', '{"n": 10}', 'order', 42, null, '2026-11-22 07:15:27+00', null);
			 ` + eventsInsert + `('order.paid', '{"n": 11}', 'order', 42, null, '2026-11-22 07:15:28+00', '');
			 ` + eventsInsert + `(repeat('x', 250), '{"n": 12}', 'order', 42, null, '2026-11-22 07:15:29+00', 'orders');
			 commit;`,
		}},
	{name: "mapped_position_ids",
		setup: auditDDL + `create publication walbox for table audit_log with (publish = 'insert');`,
		txs: []string{
			`insert into audit_log values ('user.login', '{"user": 1}', '2026-11-22 07:15:24+00'),
			   ('user.login', '{"user": 1}', '2026-11-22 07:15:24+00'), ('user.logout', '{"user": 1}', null)`,
			`insert into audit_log values ('user.login', '{"user": 1}', '2026-11-22 07:15:24+00')`,
		}},
	{name: "mapped_two_tables",
		setup: outboxDDL + `create schema legacy;
		  create table legacy.events(seq bigserial primary key, name text not null, data jsonb not null,
		    ts timestamptz not null default now());
		  create publication walbox for table outbox, legacy.events with (publish = 'insert');`,
		txs: []string{
			`begin;
			 ` + insertCols + `('00000000-0000-4000-8000-000000000801', 'order', '1', 'order.created', '{"v": 1}', '2026-11-22 07:15:24+00');
			 insert into legacy.events(name, data, ts) values ('stock.reserved', '{"sku": "A-1"}', '2026-11-22 07:15:25+00');
			 ` + insertCols + `('00000000-0000-4000-8000-000000000802', 'order', '1', 'order.paid', '{"v": 2}', '2026-11-22 07:15:26+00');
			 insert into legacy.events(name, data, ts) values ('stock.released', '{"sku": "A-1"}', '2026-11-22 07:15:27+00');
			 commit;`,
			`insert into legacy.events(name, data, ts) values ('stock.reserved', '{"sku": "B-2"}', '2026-11-22 07:15:28+00')`,
		}},
}

// emit is a call of the emit function with a fixed id and time.
func emit(id, eventType, payload, headers, at string) string {
	return fmt.Sprintf(`select walbox_emit('order', '42', %s, '%s', '%s', '%s', '%s');`, eventType, payload, headers, id, at)
}

// Messages written by the emit function instead of rows, and the logical decoding messages the
// decoder must not take for them.
var messageCases = []goldenCase{
	{name: "emitted_messages", migrate: true, txs: []string{
		emit("00000000-0000-4000-8000-000000000901", "'order.created'", `{"order_id": 42, "total": "19.99"}`,
			`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "n": 1}`, "2026-11-22 07:15:24.123456+00"),
		`begin;
		 ` + insertCols + `('00000000-0000-4000-8000-000000000902', 'order', '42', 'order.paid', '{"v": 2}', '2026-11-22 07:15:25+00');
		 ` + emit("00000000-0000-4000-8000-000000000903", "'order.packed'", `{"v": 3}`, `{}`, "2026-11-22 07:15:26+00") + `
		 ` + insertCols + `('00000000-0000-4000-8000-000000000904', 'order', '42', 'order.shipped', '{"v": 4}', '2026-11-22 07:15:27+00');
		 ` + emit("00000000-0000-4000-8000-000000000905", "'order.delivered'", `"just a string"`, `{"nested": {"k": [1, true]}}`, "2026-11-22 07:15:28+05:30") + `
		 commit;`,
		`begin;
		 ` + emit("00000000-0000-4000-8000-000000000906", "'order.cancelled'", `{}`, `{}`, "2026-11-22 07:15:29+00") + `
		 rollback;`,
		`select walbox_emit('order', '42', 'order.closed', '{"v": 7}', id => '00000000-0000-4000-8000-000000000907',
		   created_at => '2026-11-22 07:15:30+00')`,
	}},
	{name: "emitted_messages_rejected", migrate: true, txs: []string{
		// Sent at once, whether or not the transaction commits: parked, never published.
		`begin;
		 select pg_logical_emit_message(false, 'walbox', '{"v": 1, "id": "00000000-0000-4000-8000-000000000a01",
		   "aggregate_type": "order", "aggregate_id": "1", "event_type": "order.created", "payload": {}, "headers": {},
		   "created_at": "2026-11-22T07:15:24+00:00"}');
		 rollback;`,
		// Other prefixes, transactional or not, are someone else's.
		`begin;
		 select pg_logical_emit_message(true, 'walbox.audit', 'free text');
		 select pg_logical_emit_message(true, 'walboxx', '{"v": 1}');
		 select pg_logical_emit_message(false, 'Walbox', 'x');
		 select pg_logical_emit_message(true, '', 'empty prefix');
		 ` + insertCols + `('00000000-0000-4000-8000-000000000a02', 'order', '1', 'order.paid', '{}', '2026-11-22 07:15:25+00');
		 commit;`,
		// Malformed content with the prefix: each a bad row.
		`begin;
		 select pg_logical_emit_message(true, 'walbox', 'not json');
		 select pg_logical_emit_message(true, 'walbox', '{"v": 2, "id": "00000000-0000-4000-8000-000000000a03", "event_type": "e", "payload": {}}');
		 select pg_logical_emit_message(true, 'walbox', '{"v": 1, "id": "00000000-0000-4000-8000-000000000a04", "event_type": "", "payload": {}}');
		 select pg_logical_emit_message(true, 'walbox', '{"v": 1, "id": "not-a-uuid", "event_type": "e", "payload": {}}');
		 select pg_logical_emit_message(true, 'walbox', '{"v": 1, "id": "00000000-0000-4000-8000-000000000a05", "payload": {}}');
		 select pg_logical_emit_message(true, 'walbox', '{"v": 1, "id": "00000000-0000-4000-8000-000000000a06", "event_type": "e"}');
		 select pg_logical_emit_message(true, 'walbox', '{"v": 1, "id": "00000000-0000-4000-8000-000000000a07", "event_type": "e", "payload": {}, "headers": [1]}');
		 select pg_logical_emit_message(true, 'walbox', '{"v": 1, "id": "00000000-0000-4000-8000-000000000a08", "event_type": "e", "payload": {}, "created_at": "yesterday"}');
		 select pg_logical_emit_message(true, 'walbox', '{"v": 1, "id": "00000000-0000-4000-8000-000000000a09", "event_type": "e", "payload": null}');
		 commit;`,
	}},
}

func init() { goldenCases = append(append(goldenCases, mappedCases...), messageCases...) }

func TestGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join("testdata", c.name)
			if *update {
				if err := writeFrames(dir, capture(t, c)); err != nil {
					t.Fatal(err)
				}
			}
			frames, err := readFrames(dir)
			if err != nil {
				t.Fatal(err)
			}
			d, err := goldenDecoder(dir)
			if err != nil {
				t.Fatal(err)
			}
			got := goldenEvents(d, frames)
			wantFile := filepath.Join(dir, "want.json")
			if *update {
				if err := os.WriteFile(wantFile, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(wantFile)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("events differ from %s (rerun with -update after checking):\n%s", wantFile, firstDiff(got, want))
			}
		})
	}
}

// goldenDecoder returns a decoder with the mappings of the case in dir.
func goldenDecoder(dir string) (*decoder.Decoder, error) {
	maps, err := readMappings(dir)
	if err != nil {
		return nil, err
	}
	return decoder.New(maps...).WithMessagePrefix(wire.DefaultMessagePrefix), nil
}

// readMappings reads dir/mapping.json; no file gives no mappings.
func readMappings(dir string) ([]wire.Mapping, error) {
	data, err := os.ReadFile(filepath.Join(dir, "mapping.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var maps []wire.Mapping
	if err := json.Unmarshal(data, &maps); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	for _, m := range maps {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
	}
	return maps, nil
}

// frame is one captured XLogData message.
type frame struct {
	lsn  pglogrepl.LSN
	data []byte
}

const framesHeader = "# XLogData messages: WALStart, then the pgoutput message in hex. Regenerate with -update.\n"

func writeFrames(dir string, frames []frame) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b bytes.Buffer
	b.WriteString(framesHeader)
	for _, f := range frames {
		fmt.Fprintf(&b, "%s %x\n", f.lsn, f.data)
	}
	return os.WriteFile(filepath.Join(dir, "frames.txt"), b.Bytes(), 0o644)
}

func readFrames(dir string) ([]frame, error) {
	file, err := os.Open(filepath.Join(dir, "frames.txt"))
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var frames []frame
	sc := bufio.NewScanner(file)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		lsnText, hexData, _ := strings.Cut(line, " ")
		lsn, err := pglogrepl.ParseLSN(lsnText)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		data, err := hex.DecodeString(hexData)
		if err != nil {
			return nil, fmt.Errorf("%s: frame at %s: %w", dir, lsn, err)
		}
		frames = append(frames, frame{lsn, data})
	}
	return frames, sc.Err()
}

// goldenEvent is the JSON form of one Decode result in want.json.
type goldenEvent struct {
	LSN        string         `json:"lsn"`
	Type       string         `json:"type"`
	Kind       string         `json:"kind,omitempty"`
	FinalLSN   string         `json:"final_lsn,omitempty"`
	CommitLSN  string         `json:"commit_lsn,omitempty"`
	EndLSN     string         `json:"end_lsn,omitempty"`
	CommitTime string         `json:"commit_time,omitempty"`
	Xid        uint32         `json:"xid,omitempty"`
	Message    *goldenMessage `json:"message,omitempty"`
	Error      *goldenError   `json:"error,omitempty"`
}

type goldenMessage struct {
	ID            string          `json:"id"`
	AggregateType string          `json:"aggregate_type"`
	AggregateID   string          `json:"aggregate_id"`
	EventType     string          `json:"event_type"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadText   *string         `json:"payload_text,omitempty"` // a payload that is not JSON
	PayloadSize   int             `json:"payload_size,omitempty"` // a large payload, by size and hash
	PayloadSHA256 string          `json:"payload_sha256,omitempty"`
	Headers       map[string]any  `json:"headers"`
	CreatedAt     string          `json:"created_at"`
	MessageID     string          `json:"message_id,omitempty"`
	RoutingKey    string          `json:"routing_key,omitempty"`
	Exchange      string          `json:"exchange,omitempty"`
}

type goldenError struct {
	Text    string         `json:"text"`
	Is      string         `json:"is"`
	MsgID   string         `json:"msg_id,omitempty"`
	Table   string         `json:"table,omitempty"`
	Column  string         `json:"column,omitempty"`
	Partial *goldenMessage `json:"partial,omitempty"`
}

// goldenEvents decodes frames in order and renders the results as indented JSON.
func goldenEvents(d *decoder.Decoder, frames []frame) []byte {
	events := make([]goldenEvent, 0, len(frames))
	for _, f := range frames {
		ev, err := d.Decode(f.lsn, f.data)
		g := goldenEvent{LSN: f.lsn.String(), Type: string(f.data[:1])}
		if err != nil {
			g.Error = newGoldenError(err)
		} else {
			g.fill(ev)
		}
		events = append(events, g)
	}
	out, err := json.MarshalIndent(events, "", "  ")
	if err != nil {
		return []byte(err.Error())
	}
	return append(out, '\n')
}

func (g *goldenEvent) fill(ev decoder.Event) {
	g.Kind = ev.Kind.String()
	switch ev.Kind {
	case decoder.KindBegin:
		g.FinalLSN, g.CommitTime, g.Xid = ev.FinalLSN.String(), ev.CommitTime.Format(time.RFC3339Nano), ev.Xid
	case decoder.KindCommit:
		g.CommitLSN, g.EndLSN, g.CommitTime = ev.CommitLSN.String(), ev.EndLSN.String(), ev.CommitTime.Format(time.RFC3339Nano)
	case decoder.KindRow:
		g.Message = newGoldenMessage(ev.Message)
	}
}

func newGoldenMessage(m wire.Message) *goldenMessage {
	g := &goldenMessage{
		ID: m.ID.String(), AggregateType: m.AggregateType, AggregateID: m.AggregateID, EventType: m.EventType,
		Headers: m.Headers, CreatedAt: m.CreatedAt.Format(time.RFC3339Nano),
		MessageID: m.MessageID, RoutingKey: m.RoutingKey, Exchange: m.Exchange,
	}
	switch {
	case len(m.Payload) > 4096:
		g.PayloadSize = len(m.Payload)
		g.PayloadSHA256 = fmt.Sprintf("%x", sha256.Sum256(m.Payload))
	case json.Valid(m.Payload):
		g.Payload = m.Payload
	case m.Payload != nil:
		s := string(m.Payload)
		g.PayloadText = &s
	}
	return g
}

func newGoldenError(err error) *goldenError {
	g := &goldenError{Text: err.Error()}
	for _, s := range []error{decoder.ErrMalformed, decoder.ErrBadRow, decoder.ErrForeignTable, decoder.ErrStreaming} {
		if errors.Is(err, s) {
			g.Is = s.Error()
		}
	}
	if e, ok := err.(*decoder.Error); ok {
		g.Table, g.Column = e.Table, e.Column
		if decoder.IsBadRow(err) {
			g.MsgID = e.MsgID.String()
			g.Partial = newGoldenMessage(e.Partial)
		}
	}
	return g
}

// firstDiff shows the first differing line of two texts.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\ngot  %s\nwant %s", i+1, gl, wl)
		}
	}
	return "(no line differs)"
}
