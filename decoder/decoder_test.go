package decoder_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/wire"
)

const testLSN = pglogrepl.LSN(0x16B3748)

// outboxRelID is the relation id the tests announce the default outbox table under.
const outboxRelID = 16384

// newDecoder returns a Decoder that has seen the Relation message of the default outbox table.
func newDecoder(tb testing.TB, cols []col) *decoder.Decoder {
	tb.Helper()
	d := decoder.New()
	mustSkip(tb, d, relationMsg(outboxRelID, "public", "outbox", cols))
	return d
}

func mustSkip(tb testing.TB, d *decoder.Decoder, data []byte) {
	tb.Helper()
	ev, err := d.Decode(testLSN, data)
	if err != nil {
		tb.Fatalf("Decode(%q): %v", data[:1], err)
	}
	if ev.Kind != decoder.KindSkip {
		tb.Fatalf("Decode(%q) kind = %v, want skip", data[:1], ev.Kind)
	}
}

// asError returns err as an *Error, failing the test if it is anything else.
func asError(tb testing.TB, err error) *decoder.Error {
	tb.Helper()
	e, ok := err.(*decoder.Error)
	if !ok {
		tb.Fatalf("error %v is a %T, want *decoder.Error", err, err)
	}
	return e
}

func TestDecodeBeginAndCommit(t *testing.T) {
	commitTime := time.Date(2026, 11, 22, 7, 15, 24, 123456000, time.UTC)
	d := decoder.New()

	got, err := d.Decode(testLSN, beginMsg(0x16B3800, commitTime, 771))
	if err != nil {
		t.Fatal(err)
	}
	want := decoder.Event{Kind: decoder.KindBegin, FinalLSN: 0x16B3800, CommitTime: commitTime, Xid: 771}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("begin: got %+v, want %+v", got, want)
	}

	got, err = d.Decode(testLSN, commitMsg(0x16B3800, 0x16B3830, commitTime))
	if err != nil {
		t.Fatal(err)
	}
	want = decoder.Event{Kind: decoder.KindCommit, CommitLSN: 0x16B3800, EndLSN: 0x16B3830, CommitTime: commitTime}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("commit: got %+v, want %+v", got, want)
	}
}

var wantRow = wire.Message{
	ID:            uuid.MustParse(rowID),
	AggregateType: "order",
	AggregateID:   "42",
	EventType:     "order.created",
	Payload:       []byte(`{"a":1}`),
	CreatedAt:     time.Date(2026, 11, 22, 7, 15, 24, 123456000, time.UTC),
}

// withRow returns wantRow changed by f.
func withRow(f func(m *wire.Message)) wire.Message {
	m := wantRow
	f(&m)
	return m
}

// setCol returns vals with the value of the named outbox column replaced.
func setCol(vals []val, name string, v val) []val {
	vals = append([]val(nil), vals...)
	for i, c := range outboxCols {
		if c.name == name {
			vals[i] = v
		}
	}
	return vals
}

func TestDecodeRow(t *testing.T) {
	row := outboxRow(`{"a":1}`)
	textPayload := append([]col(nil), outboxCols...)
	textPayload[4].oid = oidText
	jsonPayload := append([]col(nil), outboxCols...)
	jsonPayload[4].oid = oidJSON

	tests := []struct {
		name string
		cols []col
		vals []val
		want wire.Message
	}{
		{"all columns", outboxCols, row, wantRow},
		{"NULL aggregate gives empty strings", outboxCols,
			setCol(setCol(row, "aggregate_type", null), "aggregate_id", null),
			withRow(func(m *wire.Message) { m.AggregateType, m.AggregateID = "", "" })},
		{"only the required columns",
			[]col{{"event_type", oidText}, {"payload", oidJSONB}, {"id", oidUUID}},
			[]val{text("order.created"), text(`{"a":1}`), text(rowID)},
			wire.Message{ID: wantRow.ID, EventType: "order.created", Payload: []byte(`{"a":1}`)}},
		{"columns mapped by name, others ignored",
			[]col{{"note", oidText}, {"created_at", oidTimestamptz}, {"payload", oidJSONB}, {"tenant", oidText},
				{"event_type", oidText}, {"aggregate_id", oidText}, {"id", oidUUID}, {"aggregate_type", oidText}},
			[]val{text("x"), text(rowCreatedAt), text(`{"a":1}`), null, text("order.created"), text("42"), text(rowID), text("order")},
			wantRow},
		{"NULL headers give nil", outboxCols, setCol(row, "headers", null), wantRow},
		{"empty headers give nil", outboxCols, setCol(row, "headers", text(" { } ")), wantRow},
		{"headers with JSON values", outboxCols,
			setCol(row, "headers", text(`{"traceparent": "00-4bf9-01", "n": 3, "ok": true, "none": null, "l": [1, "x"], "o": {"k": "v"}}`)),
			withRow(func(m *wire.Message) {
				m.Headers = map[string]any{"traceparent": "00-4bf9-01", "n": int64(3), "ok": true, "none": nil,
					"l": []any{int64(1), "x"}, "o": map[string]any{"k": "v"}}
			})},
		{"NULL created_at gives zero time", outboxCols, setCol(row, "created_at", null),
			withRow(func(m *wire.Message) { m.CreatedAt = time.Time{} })},
		{"jsonb payload is not validated again", outboxCols, setCol(row, "payload", text(`{"a":1`)),
			withRow(func(m *wire.Message) { m.Payload = []byte(`{"a":1`) })},
		{"json payload is not validated again", jsonPayload, setCol(row, "payload", text(`{"a":1`)),
			withRow(func(m *wire.Message) { m.Payload = []byte(`{"a":1`) })},
		{"text payload that is JSON", textPayload, setCol(row, "payload", text(` [1, 2] `)),
			withRow(func(m *wire.Message) { m.Payload = []byte(` [1, 2] `) })},
		{"unicode", outboxCols,
			setCol(setCol(row, "aggregate_id", text("ünï-🚀")), "payload", text(`{"m":"こんにちは"}`)),
			withRow(func(m *wire.Message) { m.AggregateID, m.Payload = "ünï-🚀", []byte(`{"m":"こんにちは"}`) })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDecoder(t, tt.cols)
			got, err := d.Decode(testLSN, insertMsg(outboxRelID, tt.vals...))
			if err != nil {
				t.Fatal(err)
			}
			want := decoder.Event{Kind: decoder.KindRow, Message: tt.want, Table: "public.outbox"}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got.Message, want.Message)
			}
		})
	}
}

func TestDecodeCreatedAt(t *testing.T) {
	tests := []struct {
		in   string
		want time.Time
	}{
		{"2026-11-22 07:15:24.123456+00", time.Date(2026, 11, 22, 7, 15, 24, 123456000, time.UTC)},
		{"2026-11-22 07:15:24+00", time.Date(2026, 11, 22, 7, 15, 24, 0, time.UTC)},
		{"2026-11-22 07:15:24.5+00", time.Date(2026, 11, 22, 7, 15, 24, 500000000, time.UTC)},
		{"2026-11-22 12:45:24.123456+05:30", time.Date(2026, 11, 22, 7, 15, 24, 123456000, time.UTC)},
		{"2026-11-22 12:45:24+05:30:00", time.Date(2026, 11, 22, 7, 15, 24, 0, time.UTC)},
		{"1890-06-01 17:53:28+05:53:28", time.Date(1890, 6, 1, 12, 0, 0, 0, time.UTC)},
		{"2026-11-22 03:15:24-04", time.Date(2026, 11, 22, 7, 15, 24, 0, time.UTC)},
		{"2026-11-22 00:00:00-09:30", time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC)},
		{"2026-11-22T07:15:24+00", time.Date(2026, 11, 22, 7, 15, 24, 0, time.UTC)},
		{"2026-11-22 07:15:24", time.Date(2026, 11, 22, 7, 15, 24, 0, time.UTC)},
		{"2024-02-29 23:59:59.999999+00", time.Date(2024, 2, 29, 23, 59, 59, 999999000, time.UTC)},
		{"12026-11-22 07:15:24+00", time.Date(12026, 11, 22, 7, 15, 24, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			d := newDecoder(t, outboxCols)
			ev, err := d.Decode(testLSN, insertMsg(outboxRelID, setCol(outboxRow("{}"), "created_at", text(tt.in))...))
			if err != nil {
				t.Fatal(err)
			}
			if got := ev.Message.CreatedAt; !got.Equal(tt.want) || got.Location() != time.UTC {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDecodeBadRow(t *testing.T) {
	row := outboxRow(`{"a":1}`)
	textPayload := append([]col(nil), outboxCols...)
	textPayload[4].oid = oidText
	textHeaders := append([]col(nil), outboxCols...)
	textHeaders[5].oid = oidText

	tests := []struct {
		name        string
		cols        []col
		vals        []val
		wantColumn  string
		wantPartial wire.Message
	}{
		{"NULL id", outboxCols, setCol(row, "id", null), "id",
			withRow(func(m *wire.Message) { m.ID = uuid.Nil })},
		{"id that is not a UUID", outboxCols, setCol(row, "id", text("42")), "id",
			withRow(func(m *wire.Message) { m.ID = uuid.Nil })},
		{"NULL event_type", outboxCols, setCol(row, "event_type", null), "event_type",
			withRow(func(m *wire.Message) { m.EventType = "" })},
		{"empty event_type", outboxCols, setCol(row, "event_type", text("")), "event_type",
			withRow(func(m *wire.Message) { m.EventType = "" })},
		{"NULL payload", outboxCols, setCol(row, "payload", null), "payload",
			withRow(func(m *wire.Message) { m.Payload = nil })},
		{"text payload that is not JSON keeps the raw payload", textPayload,
			setCol(row, "payload", text("not json {")), "payload",
			withRow(func(m *wire.Message) { m.Payload = []byte("not json {") })},
		{"empty text payload", textPayload, setCol(row, "payload", text("")), "payload",
			withRow(func(m *wire.Message) { m.Payload = []byte{} })},
		{"headers array", outboxCols, setCol(row, "headers", text(`[1,2]`)), "headers", wantRow},
		{"headers JSON null", outboxCols, setCol(row, "headers", text(`null`)), "headers", wantRow},
		{"headers string", outboxCols, setCol(row, "headers", text(`"x"`)), "headers", wantRow},
		{"text headers that are not JSON", textHeaders, setCol(row, "headers", text(`{"a":`)), "headers", wantRow},
		{"created_at that is not a timestamp", outboxCols, setCol(row, "created_at", text("infinity")), "created_at",
			withRow(func(m *wire.Message) { m.CreatedAt = time.Time{} })},
		{"the first bad column is named, all others decoded", outboxCols,
			setCol(setCol(row, "event_type", text("")), "created_at", text("yesterday")), "event_type",
			withRow(func(m *wire.Message) { m.EventType, m.CreatedAt = "", time.Time{} })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDecoder(t, tt.cols)
			ev, err := d.Decode(testLSN, insertMsg(outboxRelID, tt.vals...))
			if err == nil {
				t.Fatalf("got %+v, want an error", ev)
			}
			e := asError(t, err)
			if !decoder.IsBadRow(err) || !errors.Is(err, decoder.ErrBadRow) {
				t.Errorf("IsBadRow(%v) = false", err)
			}
			if e.LSN != testLSN || e.Column != tt.wantColumn || e.Table != "public.outbox" || e.MsgID != tt.wantPartial.ID {
				t.Errorf("got LSN %v, column %q, table %q, msg %v; want %v, %q, public.outbox, %v",
					e.LSN, e.Column, e.Table, e.MsgID, testLSN, tt.wantColumn, tt.wantPartial.ID)
			}
			if !reflect.DeepEqual(e.Partial, tt.wantPartial) {
				t.Errorf("partial:\ngot  %+v\nwant %+v", e.Partial, tt.wantPartial)
			}
		})
	}
}

func TestDecodeBadCreatedAt(t *testing.T) {
	for _, in := range []string{
		"", "infinity", "-infinity", "2026-11-22", "2026-11-22 07:15", "2026-11-22 07:15:24 BC",
		"2026-11-22 07:15:24.+00", "2026-11-22 07:15:24.1234567890+00", "2026-02-30 07:15:24+00",
		"2026-13-01 07:15:24+00", "2026-11-22 24:00:00+00", "2026-11-22 07:60:24+00", "2026-11-22 07:15:60+00",
		"2026-11-22 07:15:24+16", "2026-11-22 07:15:24+05:60", "2026-11-22 07:15:24+05:30:60",
		"2026-11-22 07:15:24+5", "2026-11-22 07:15:24Z", "026-11-22 07:15:24+00", "2026-11-22  07:15:24+00",
		"Sun Nov 22 07:15:24.123456 2026 UTC", "2026-11-22 07:15:24+00 ", "２０２６-11-22 07:15:24+00",
	} {
		t.Run(in, func(t *testing.T) {
			d := newDecoder(t, outboxCols)
			_, err := d.Decode(testLSN, insertMsg(outboxRelID, setCol(outboxRow("{}"), "created_at", text(in))...))
			if e := asError(t, err); !decoder.IsBadRow(err) || e.Column != "created_at" {
				t.Errorf("got %v, want a bad row in column created_at", err)
			}
		})
	}
}
