package decoder_test

import (
	"errors"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/wire"
)

const (
	oidInt8     = 20
	eventsRelID = 16390
)

// eventsTable is a legacy outbox table read through eventsMapping.
var eventsTable = wire.Table{Schema: "public", Name: "events"}

// eventsCols are the columns of eventsTable, in its order.
var eventsCols = []col{
	{"event_id", oidInt8}, {"kind", oidText}, {"body", oidJSONB}, {"entity", oidText}, {"entity_id", oidInt8},
	{"meta", oidJSONB}, {"occurred_at", oidTimestamptz}, {"target_exchange", oidText},
}

var eventsMapping = wire.Mapping{
	Table: eventsTable, ID: "event_id", EventType: "kind", Payload: "body", AggregateType: "entity",
	AggregateID: "entity_id", Headers: "meta", CreatedAt: "occurred_at", ExchangeColumn: "target_exchange",
	RoutingKey: "{entity}.{kind}",
}

// eventsRow returns a typical row of eventsTable.
func eventsRow() []val {
	return []val{text("42"), text("order.created"), text(`{"a":1}`), text("order"), text("7"),
		text(`{"traceparent":"00-4bf9-01"}`), text(rowCreatedAt), text("orders")}
}

var wantEvent = wire.Message{
	MessageID: "42", AggregateType: "order", AggregateID: "7", EventType: "order.created",
	Payload: []byte(`{"a":1}`), Headers: map[string]any{"traceparent": "00-4bf9-01"},
	CreatedAt: wantRow.CreatedAt, Exchange: "orders", RoutingKey: "order.order.created",
}

// withEvent returns wantEvent changed by f.
func withEvent(f func(m *wire.Message)) wire.Message {
	m := wantEvent
	f(&m)
	return m
}

// eventsVals returns eventsRow with the named columns replaced: name, value, name, value...
func eventsVals(pairs ...any) []val {
	vals := eventsRow()
	for i := 0; i < len(pairs); i += 2 {
		for j, c := range eventsCols {
			if c.name == pairs[i].(string) {
				vals[j] = pairs[i+1].(val)
			}
		}
	}
	return vals
}

// mapped returns eventsMapping changed by f.
func mapped(f func(m *wire.Mapping)) wire.Mapping {
	m := eventsMapping
	f(&m)
	return m
}

// newMappedDecoder returns a Decoder for m that has seen the Relation message of its table.
func newMappedDecoder(tb testing.TB, m wire.Mapping, cols []col) *decoder.Decoder {
	tb.Helper()
	d := decoder.New(m)
	mustSkip(tb, d, relationMsg(eventsRelID, m.Table.Schema, m.Table.Name, cols))
	return d
}

func TestDecodeMappedRow(t *testing.T) {
	withCol := func(name string, oid uint32) []col {
		cols := append([]col(nil), eventsCols...)
		for i := range cols {
			if cols[i].name == name {
				cols[i].oid = oid
			}
		}
		return cols
	}
	tests := []struct {
		name    string
		mapping wire.Mapping
		cols    []col
		vals    []val
		want    wire.Message
	}{
		{"every column mapped", eventsMapping, eventsCols, eventsRow(), wantEvent},
		{"a text id is the message id", eventsMapping, withCol("event_id", oidText),
			eventsVals("event_id", text("evt-42")), withEvent(func(m *wire.Message) { m.MessageID = "evt-42" })},
		{"a uuid id under another name is the id", eventsMapping, withCol("event_id", oidUUID),
			eventsVals("event_id", text(rowID)),
			withEvent(func(m *wire.Message) { m.ID, m.MessageID = uuid.MustParse(rowID), "" })},
		{"absent columns give zero values",
			mapped(func(m *wire.Mapping) {
				m.AggregateType, m.AggregateID, m.Headers, m.CreatedAt = "-", "-", "-", "-"
				m.RoutingKey = "{kind}"
			}), eventsCols, eventsRow(),
			withEvent(func(m *wire.Message) {
				m.AggregateType, m.AggregateID, m.Headers, m.CreatedAt = "", "", nil, time.Time{}
				m.RoutingKey = "order.created"
			})},
		{"an absent column is not read under its default name",
			mapped(func(m *wire.Mapping) { m.Headers = "-" }),
			append(append([]col(nil), eventsCols...), col{"headers", oidText}), append(eventsRow(), text("not json")),
			withEvent(func(m *wire.Message) { m.Headers = nil })},
		{"NULL optional columns give zero values", eventsMapping, eventsCols,
			eventsVals("entity_id", null, "meta", null, "occurred_at", null),
			withEvent(func(m *wire.Message) { m.AggregateID, m.Headers, m.CreatedAt = "", nil, time.Time{} })},
		{"no exchange column leaves the exchange to the relay", mapped(func(m *wire.Mapping) { m.ExchangeColumn = "" }),
			eventsCols, eventsRow(), withEvent(func(m *wire.Message) { m.Exchange = "" })},
		{"no template leaves the routing key to the event type", mapped(func(m *wire.Mapping) { m.RoutingKey = "" }),
			eventsCols, eventsRow(), withEvent(func(m *wire.Message) { m.RoutingKey = "" })},
		{"a template of literal text", mapped(func(m *wire.Mapping) { m.RoutingKey = "all.events" }),
			eventsCols, eventsRow(), withEvent(func(m *wire.Message) { m.RoutingKey = "all.events" })},
		{"a template with literals, repeats and any column",
			mapped(func(m *wire.Mapping) { m.RoutingKey = "v1.{entity}/{entity_id}.{kind}.{entity}.{target_exchange}" }),
			eventsCols, eventsRow(),
			withEvent(func(m *wire.Message) { m.RoutingKey = "v1.order/7.order.created.order.orders" })},
		{"an empty placeholder value is kept", eventsMapping, eventsCols, eventsVals("entity", text("")),
			withEvent(func(m *wire.Message) { m.AggregateType, m.RoutingKey = "", ".order.created" })},
		{"a template with an unpaired brace", mapped(func(m *wire.Mapping) { m.RoutingKey = "}{kind}{" }),
			eventsCols, eventsRow(), withEvent(func(m *wire.Message) { m.RoutingKey = "}order.created{" })},
		{"a routing key of 255 bytes", eventsMapping, eventsCols, eventsVals("entity", text(strings.Repeat("e", 241))),
			withEvent(func(m *wire.Message) {
				m.AggregateType, m.RoutingKey = strings.Repeat("e", 241), strings.Repeat("e", 241)+".order.created"
			})},
		{"a text payload is validated", eventsMapping, withCol("body", oidText), eventsVals("body", text(" [1] ")),
			withEvent(func(m *wire.Message) { m.Payload = []byte(" [1] ") })},
		{"a deliver-at column is the message's deliver_at",
			mapped(func(m *wire.Mapping) { m.DeliverAt = "remind_at" }),
			append(append([]col(nil), eventsCols...), col{"remind_at", oidTimestamptz}), append(eventsRow(), text(rowCreatedAt)),
			withEvent(func(m *wire.Message) { m.DeliverAt = wantRow.CreatedAt })},
		{"a NULL deliver-at column leaves at once",
			mapped(func(m *wire.Mapping) { m.DeliverAt = "remind_at" }),
			append(append([]col(nil), eventsCols...), col{"remind_at", oidTimestamptz}), append(eventsRow(), null), wantEvent},
		{"the default mapping's column names on another table", wire.Mapping{Table: eventsTable}, outboxCols,
			outboxRow(`{"a":1}`), wantRow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newMappedDecoder(t, tt.mapping, tt.cols)
			ev, err := d.Decode(testLSN, insertMsg(eventsRelID, tt.vals...))
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind != decoder.KindRow || !reflect.DeepEqual(ev.Message, tt.want) {
				t.Errorf("got  %v %+v\nwant %+v", ev.Kind, ev.Message, tt.want)
			}
		})
	}
}

func TestDecodeMappedBadRow(t *testing.T) {
	uuidID := append([]col(nil), eventsCols...)
	uuidID[0].oid = oidUUID
	long := strings.Repeat("x", 256)

	tests := []struct {
		name       string
		cols       []col
		vals       []val
		wantColumn string
		wantText   string
		want       wire.Message // the partial message
	}{
		{"NULL id", eventsCols, eventsVals("event_id", null), "event_id", "event_id (id) is NULL",
			withEvent(func(m *wire.Message) { m.MessageID = "" })},
		{"empty id", eventsCols, eventsVals("event_id", text("")), "event_id", "event_id (id) is empty",
			withEvent(func(m *wire.Message) { m.MessageID = "" })},
		{"id too long for AMQP", eventsCols, eventsVals("event_id", text(long)), "event_id",
			"event_id (id) is 256 bytes long, more than 255", withEvent(func(m *wire.Message) { m.MessageID = long })},
		{"uuid id that is not a UUID", uuidID, eventsVals("event_id", text("42")), "event_id",
			"event_id (id) is not a UUID", withEvent(func(m *wire.Message) { m.MessageID = "" })},
		{"NULL event type", eventsCols, eventsVals("kind", null), "kind", "kind (event_type) is NULL",
			withEvent(func(m *wire.Message) { m.EventType, m.RoutingKey = "", "" })},
		{"NULL routing key column", eventsCols, eventsVals("entity", null), "entity", "entity (routing key) is NULL",
			withEvent(func(m *wire.Message) { m.AggregateType, m.RoutingKey = "", "" })},
		{"routing key too long", eventsCols, eventsVals("entity", text(strings.Repeat("e", 242))), "",
			"routing key is 256 bytes long, more than 255",
			withEvent(func(m *wire.Message) { m.AggregateType, m.RoutingKey = strings.Repeat("e", 242), "" })},
		{"NULL exchange", eventsCols, eventsVals("target_exchange", null), "target_exchange",
			"target_exchange (exchange) is NULL", withEvent(func(m *wire.Message) { m.Exchange = "" })},
		{"empty exchange", eventsCols, eventsVals("target_exchange", text("")), "target_exchange",
			"target_exchange (exchange) is empty", withEvent(func(m *wire.Message) { m.Exchange = "" })},
		{"exchange too long for AMQP", eventsCols, eventsVals("target_exchange", text(long)), "target_exchange",
			"target_exchange (exchange) is 256 bytes long, more than 255",
			withEvent(func(m *wire.Message) { m.Exchange = long })},
		{"payload NULL", eventsCols, eventsVals("body", null), "body", "body (payload) is NULL",
			withEvent(func(m *wire.Message) { m.Payload = nil })},
		{"headers not an object", eventsCols, eventsVals("meta", text("[1]")), "meta", "meta (headers) is not a JSON object",
			withEvent(func(m *wire.Message) { m.Headers = nil })},
		{"created_at not a timestamp", eventsCols, eventsVals("occurred_at", text("x")), "occurred_at",
			"occurred_at (created_at) is not a timestamp", withEvent(func(m *wire.Message) { m.CreatedAt = time.Time{} })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newMappedDecoder(t, eventsMapping, tt.cols)
			ev, err := d.Decode(testLSN, insertMsg(eventsRelID, tt.vals...))
			if err == nil {
				t.Fatalf("got %+v, want an error", ev)
			}
			e := asError(t, err)
			if !decoder.IsBadRow(err) || e.Column != tt.wantColumn || e.Table != "public.events" ||
				!strings.HasSuffix(e.Error(), ": "+tt.wantText) {
				t.Errorf("got %v (column %q, table %q), want a bad row in column %q of public.events: %s",
					err, e.Column, e.Table, tt.wantColumn, tt.wantText)
			}
			if !reflect.DeepEqual(e.Partial, tt.want) {
				t.Errorf("partial:\ngot  %+v\nwant %+v", e.Partial, tt.want)
			}
		})
	}
}

// A Relation message that announces an outbox table without a column its mapping needs (renamed or
// dropped mid-stream) is a configuration error naming the column, not a bad row in every insert.
func TestDecodeRelationDriftStops(t *testing.T) {
	for _, missing := range []string{"kind", "entity", "body", "event_id"} {
		t.Run("without "+missing, func(t *testing.T) {
			var cols []col
			for _, c := range eventsCols {
				if c.name != missing {
					cols = append(cols, c)
				}
			}
			d := decoder.New(eventsMapping)
			_, err := d.Decode(testLSN, relationMsg(eventsRelID, "public", "events", cols))
			if !errors.Is(err, decoder.ErrSchemaDrift) || decoder.IsBadRow(err) || !strings.Contains(err.Error(), `no column "`+missing+`"`) {
				t.Errorf("got %v, want a schema drift error naming column %q", err, missing)
			}
		})
	}
}

// The walsender sends a Relation message with a zero WAL start: its error names the position of
// the transaction it came in, its commit LSN, never 0/0.
func TestDecodeRelationDriftNamesTheTransaction(t *testing.T) {
	d := decoder.New(eventsMapping)
	final := pglogrepl.LSN(0x1958AD8)
	if _, err := d.Decode(testLSN, beginMsg(final, time.Now(), 7)); err != nil {
		t.Fatal(err)
	}
	_, err := d.Decode(0, relationMsg(eventsRelID, "public", "events", eventsCols[1:]))
	var de *decoder.Error
	if !errors.As(err, &de) || de.LSN != final || !strings.Contains(err.Error(), "decode at "+final.String()) {
		t.Errorf("got %v, want a schema drift error at %s", err, final)
	}
}

// PostgreSQL allows a dot in a quoted schema name: the column check must find the mapping of
// such a table as the decoder does, by schema and name, not by splitting "schema.name" again.
func TestDecodeRelationDottedSchema(t *testing.T) {
	m := wire.Mapping{Table: wire.Table{Schema: "billing.v2", Name: "outbox"}}.WithDefaults()
	d := decoder.New(m)
	ev, err := d.Decode(testLSN, relationMsg(outboxRelID, "billing.v2", "outbox", outboxCols))
	if err != nil || ev.Kind != decoder.KindSkip {
		t.Fatalf("relation of billing.v2.outbox: %v, %v", ev.Kind, err)
	}
	_, err = d.Decode(testLSN, relationMsg(outboxRelID+1, "billing.v2", "outbox", outboxCols[1:]))
	if !errors.Is(err, decoder.ErrSchemaDrift) {
		t.Fatalf("relation without id: %v, want a schema drift error", err)
	}
}

func TestErrorNamesTextID(t *testing.T) {
	d := newMappedDecoder(t, eventsMapping, eventsCols)
	_, err := d.Decode(testLSN, insertMsg(eventsRelID, eventsVals("kind", text(""))...))
	want := "decode at 0/16B3748 (msg 42, table public.events, column kind): bad outbox row: kind (event_type) is empty"
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

// positionMapping maps the events table without its id: rows get position ids.
var positionMapping = mapped(func(m *wire.Mapping) { m.ID, m.MessageID = "-", wire.IDFromPosition })

func TestPositionIDs(t *testing.T) {
	d := decoder.New(positionMapping, wire.Mapping{Table: wire.DefaultTable}.WithDefaults())
	frames := [][]byte{
		beginMsg(0x16B3800, commitTime, 771),
		relationMsg(eventsRelID, "public", "events", eventsCols),
		relationMsg(outboxRelID, "public", "outbox", outboxCols),
		insertMsg(eventsRelID, eventsRow()...),                // 0
		insertMsg(outboxRelID, outboxRow("{}")...),            // 1: another table counts too
		insertMsg(eventsRelID, eventsVals("entity", null)...), // 2: a bad row counts too
		insertMsg(eventsRelID, eventsRow()...),                // 3
		commitMsg(0x16B3800, 0x16B3830, commitTime),
		beginMsg(0x16B3900, commitTime, 772),
		insertMsg(eventsRelID, eventsRow()...), // 0 of the next transaction
		commitMsg(0x16B3900, 0x16B3930, commitTime),
	}
	want := []uuid.UUID{
		decoder.PositionID(0x16B3800, 0), decoder.PositionID(0x16B3800, 2), decoder.PositionID(0x16B3800, 3),
		decoder.PositionID(0x16B3900, 0),
	}
	first := positionIDs(t, d, frames)
	if !reflect.DeepEqual(first, want) {
		t.Fatalf("got ids %v, want %v", first, want)
	}
	checkDistinct(t, first)
	if again := positionIDs(t, d, frames); !reflect.DeepEqual(again, first) {
		t.Errorf("decoded again: got %v, want %v", again, first)
	}
	fresh := decoder.New(positionMapping, wire.Mapping{Table: wire.DefaultTable}.WithDefaults())
	if again := positionIDs(t, fresh, frames); !reflect.DeepEqual(again, first) {
		t.Errorf("decoded by a new decoder: got %v, want %v", again, first)
	}
}

// positionIDs decodes frames and returns the ids of the events table's rows, good or bad.
func positionIDs(tb testing.TB, d *decoder.Decoder, frames [][]byte) []uuid.UUID {
	tb.Helper()
	var ids []uuid.UUID
	for _, f := range frames {
		ev, err := d.Decode(testLSN, f)
		var e *decoder.Error
		switch {
		case errors.As(err, &e) && decoder.IsBadRow(err):
			ids = append(ids, e.MsgID)
		case err != nil:
			tb.Fatal(err)
		case ev.Kind == decoder.KindRow && ev.Message.Exchange != "": // not the outbox table
			ids = append(ids, ev.Message.ID)
		}
	}
	return ids
}

func checkDistinct(tb testing.TB, ids []uuid.UUID) {
	tb.Helper()
	seen := map[uuid.UUID]bool{}
	for _, id := range ids {
		if id == uuid.Nil || seen[id] {
			tb.Errorf("id %v is nil or not unique in %v", id, ids)
		}
		seen[id] = true
	}
}

// TestGoldenPositionIDs decodes the captured position id cases again, by the same decoder and
// by a new one, as after a reconnect: every row keeps its id, and no two rows share one.
func TestGoldenPositionIDs(t *testing.T) {
	for _, name := range []string{"mapped_position_ids", "mapped_two_tables"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", name)
			frames, err := readFrames(dir)
			if err != nil {
				t.Fatal(err)
			}
			d, err := goldenDecoder(dir)
			if err != nil {
				t.Fatal(err)
			}
			first := rowIDs(t, d, frames)
			checkDistinct(t, first)
			if len(first) < 4 {
				t.Fatalf("only %d rows", len(first))
			}
			if again := rowIDs(t, d, frames); !reflect.DeepEqual(again, first) {
				t.Errorf("decoded again: got %v, want %v", again, first)
			}
			fresh, _ := goldenDecoder(dir)
			if again := rowIDs(t, fresh, frames); !reflect.DeepEqual(again, first) {
				t.Errorf("decoded by a new decoder: got %v, want %v", again, first)
			}
		})
	}
}

func rowIDs(tb testing.TB, d *decoder.Decoder, frames []frame) []uuid.UUID {
	tb.Helper()
	var ids []uuid.UUID
	for _, f := range frames {
		ev, err := d.Decode(f.lsn, f.data)
		if err != nil {
			tb.Fatal(err)
		}
		if ev.Kind == decoder.KindRow {
			ids = append(ids, ev.Message.ID)
		}
	}
	return ids
}

func TestPositionID(t *testing.T) {
	ns := uuid.MustParse(decoder.PositionNamespace)
	for _, tt := range []struct {
		lsn     pglogrepl.LSN
		ordinal int
		name    string
	}{
		{0x16_B374D848, 12, "16/B374D848/12"},
		{0, 0, "0/0/0"},
		{0xFFFFFFFF_FFFFFFFF, 1<<31 - 1, "FFFFFFFF/FFFFFFFF/2147483647"},
		{0xABCDEF, 1, "0/ABCDEF/1"},
	} {
		if tt.lsn.String()+"/"+strconv.Itoa(tt.ordinal) != tt.name {
			t.Errorf("name %q is not the LSN's text %q", tt.name, tt.lsn)
		}
		want := uuid.NewSHA1(ns, []byte(tt.name))
		if got := decoder.PositionID(tt.lsn, tt.ordinal); got != want || got.Version() != 5 || got.Variant() != uuid.RFC4122 {
			t.Errorf("PositionID(%v, %d) = %v, want %v, the version 5 UUID of %q", tt.lsn, tt.ordinal, got, want, tt.name)
		}
	}
}

func TestNewCompletesMappings(t *testing.T) {
	for _, d := range []*decoder.Decoder{
		decoder.New(),
		decoder.New(wire.Mapping{Table: wire.DefaultTable}.WithDefaults()),
		decoder.New(wire.Mapping{Table: wire.DefaultTable}),
		decoder.New(wire.Mapping{}), // the zero Table is the default table
	} {
		mustSkip(t, d, relationMsg(outboxRelID, "public", "outbox", outboxCols))
		ev, err := d.Decode(testLSN, insertMsg(outboxRelID, outboxRow(`{"a":1}`)...))
		if err != nil || !reflect.DeepEqual(ev.Message, wantRow) {
			t.Errorf("got %+v, %v; want %+v", ev.Message, err, wantRow)
		}
	}
}
