package decoder_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/wire"
)

var commitTime = time.Date(2026, 11, 22, 7, 15, 24, 0, time.UTC)

// validMessages are well-formed messages of every type, decodable by newDecoder(t, outboxCols).
func validMessages() map[string][]byte {
	return map[string][]byte{
		"begin":    beginMsg(0x16B3800, commitTime, 771),
		"commit":   commitMsg(0x16B3800, 0x16B3830, commitTime),
		"relation": relationMsg(outboxRelID, "public", "outbox", outboxCols),
		"insert":   insertMsg(outboxRelID, outboxRow(`{"a":1}`)...),
		"insert with NULLs": insertMsg(outboxRelID,
			setCol(setCol(outboxRow(`{"a":1}`), "aggregate_id", null), "headers", null)...),
		"type":              typeMsg(16390, "public", "mood"),
		"origin":            originMsg(0x1234, "upstream"),
		"update":            updateMsg(outboxRelID, nil, outboxRow(`{"a":2}`)...),
		"update with old":   updateMsg(outboxRelID, outboxRow(`{"a":1}`), setCol(outboxRow(`{"a":2}`), "payload", val{kind: 'u'})...),
		"delete":            deleteMsg(outboxRelID, text(rowID)),
		"truncate":          truncateMsg(outboxRelID, 16390),
		"logical message":   logicalMsg(true, 0x16B3800, "walbox", "hello"),
		"empty logical msg": logicalMsg(false, 0x16B3800, "", ""),
	}
}

// A transactional logical decoding message of another prefix is one of the transaction's
// changes: the relay counts it among a row's position, whatever its message prefix.
func TestDecodeCountsTransactionalMessagesOfAnotherPrefix(t *testing.T) {
	ev, err := newDecoder(t, outboxCols).Decode(0, validMessages()["logical message"])
	if err != nil || ev.Kind != decoder.KindOtherMessage {
		t.Fatalf("Decode: kind %v, %v; want %v", ev.Kind, err, decoder.KindOtherMessage)
	}
}

func TestDecodeSkipsMessagesWithoutRows(t *testing.T) {
	for _, name := range []string{"relation", "type", "origin", "update", "update with old", "delete", "truncate", "empty logical msg"} {
		t.Run(name, func(t *testing.T) {
			mustSkip(t, newDecoder(t, outboxCols), validMessages()[name])
		})
	}
}

// TestDecodeTruncated cuts every valid message at every byte offset: each prefix must be an
// ErrMalformed error, and nothing may panic.
func TestDecodeTruncated(t *testing.T) {
	for name, data := range validMessages() {
		t.Run(name, func(t *testing.T) {
			for n := range len(data) {
				d := newDecoder(t, outboxCols)
				_, err := d.Decode(testLSN, data[:n])
				if e := asError(t, err); !errors.Is(err, decoder.ErrMalformed) || e.LSN != testLSN {
					t.Errorf("prefix of %d bytes: got %v, want ErrMalformed at %v", n, err, testLSN)
				}
			}
		})
	}
}

// TestDecodeOverlong appends a byte to every valid message: each must be an ErrMalformed error.
func TestDecodeOverlong(t *testing.T) {
	for name, data := range validMessages() {
		t.Run(name, func(t *testing.T) {
			_, err := newDecoder(t, outboxCols).Decode(testLSN, append(bytes.Clone(data), 0))
			if asError(t, err); !errors.Is(err, decoder.ErrMalformed) {
				t.Errorf("got %v, want ErrMalformed", err)
			}
		})
	}
}

func TestDecodeMalformed(t *testing.T) {
	row := outboxRow(`{"a":1}`)
	tests := []struct {
		name       string
		data       []byte
		wantColumn string
	}{
		{"empty message", nil, ""},
		{"unknown message type", []byte("Z\x00\x00"), ""},
		{"insert into an unannounced relation", insertMsg(outboxRelID+1, row...), ""},
		{"insert without new tuple tag", msg{'I'}.u32(outboxRelID).u8('K').tuple(row), ""},
		{"insert with too few columns", insertMsg(outboxRelID, row[:6]...), ""},
		{"insert with too many columns", insertMsg(outboxRelID, append(row, null)...), ""},
		{"unchanged TOAST value in an insert", insertMsg(outboxRelID, setCol(row, "payload", val{kind: 'u'})...), "payload"},
		{"binary value", insertMsg(outboxRelID, setCol(row, "aggregate_id", val{kind: 'b', data: "42"})...), "aggregate_id"},
		{"unknown column kind", insertMsg(outboxRelID, setCol(row, "headers", val{kind: 'x'})...), "headers"},
		{"column length past the end", msg{'I'}.u32(outboxRelID).u8('N').u16(7).u8('t').u32(0xffffffff), "id"},
		{"update with unknown tuple tag", msg{'U'}.u32(outboxRelID).u8('X').tuple(row), ""},
		{"update with two old tuples", msg{'U'}.u32(outboxRelID).u8('O').tuple(row).u8('O').tuple(row), ""},
		{"update with unknown column kind", updateMsg(outboxRelID, nil, val{kind: 'x'}), ""},
		{"delete with new tuple tag", msg{'D'}.u32(outboxRelID).u8('N').tuple(row), ""},
		{"truncate with a short id list", msg{'T'}.u32(3).u8(0).u32(1).u32(2), ""},
		{"truncate with a huge count", msg{'T'}.u32(0xffffffff).u8(0).u32(1), ""},
		{"relation with a huge column count", msg{'R'}.u32(1).str("public").str("outbox").u8('d').u16(0xffff), ""},
		{"relation without NUL", msg{'R'}.u32(1).str("public").u8('o'), ""},
		{"logical message content past the end", msg{'M'}.u8(1).u64(1).str("p").u32(10).u8('x'), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newDecoder(t, outboxCols).Decode(testLSN, tt.data)
			e := asError(t, err)
			if !errors.Is(err, decoder.ErrMalformed) || e.LSN != testLSN || e.Column != tt.wantColumn {
				t.Errorf("got %v (column %q), want ErrMalformed (column %q) at %v", err, e.Column, tt.wantColumn, testLSN)
			}
			if decoder.IsBadRow(err) {
				t.Errorf("IsBadRow(%v) = true", err)
			}
		})
	}
}

func TestDecodeStreamingIsAnError(t *testing.T) {
	for _, typ := range []byte{'S', 'E', 'c', 'A'} {
		t.Run(string(typ), func(t *testing.T) {
			_, err := decoder.New().Decode(testLSN, msg{typ}.u32(771).u8(1))
			if asError(t, err); !errors.Is(err, decoder.ErrStreaming) {
				t.Errorf("got %v, want ErrStreaming", err)
			}
		})
	}
}

func TestDecodeForeignTable(t *testing.T) {
	d := decoder.New(wire.Mapping{Table: wire.DefaultTable}.WithDefaults(), wire.Mapping{Table: wire.Table{Schema: "app", Name: "events"}}.WithDefaults())
	mustSkip(t, d, relationMsg(1, "public", "orders", []col{{"id", 23}, {"note", oidText}}))
	mustSkip(t, d, relationMsg(2, "app", "events", outboxCols))
	mustSkip(t, d, relationMsg(3, "other", "outbox", outboxCols))

	tests := []struct {
		table string
		data  []byte
	}{
		{"public.orders", insertMsg(1, text("1"), null)},
		{"other.outbox", insertMsg(3, outboxRow("{}")...)},
	}
	for _, tt := range tests {
		t.Run(tt.table, func(t *testing.T) {
			_, err := d.Decode(testLSN, tt.data)
			if e := asError(t, err); !errors.Is(err, decoder.ErrForeignTable) || e.Table != tt.table {
				t.Errorf("got %v (table %q), want ErrForeignTable naming %s", err, e.Table, tt.table)
			}
		})
	}
	t.Run("a configured table in another schema", func(t *testing.T) {
		ev, err := d.Decode(testLSN, insertMsg(2, outboxRow(`{"a":1}`)...))
		if err != nil || ev.Kind != decoder.KindRow || ev.Table != "app.events" {
			t.Errorf("got %v of table %q, %v; want a row of app.events", ev.Kind, ev.Table, err)
		}
	})
}

// TestDecodeRelationReplaced follows a table through ALTER TABLE: each Relation message
// replaces the previous one, and rows decode by the latest column names.
func TestDecodeRelationReplaced(t *testing.T) {
	d := newDecoder(t, outboxCols)
	steps := []struct {
		name string
		cols []col // a new Relation message, if any
		vals []val
		want wire.Message
	}{
		{"before", nil, outboxRow(`{"a":1}`), wantRow},
		{"column added", append(append([]col(nil), outboxCols...), col{"tenant", oidText}),
			append(outboxRow(`{"a":1}`), text("acme")), wantRow},
		{"headers dropped", append(append([]col(nil), outboxCols[:5]...), outboxCols[6], col{"tenant", oidText}),
			[]val{text(rowID), text("order"), text("42"), text("order.created"), text(`{"a":1}`), text(rowCreatedAt), text("acme")},
			wantRow},
		{"aggregate_type dropped and headers re-added", append(append(append([]col(nil), outboxCols[0]), outboxCols[2:5]...), outboxCols[6], outboxCols[5]),
			[]val{text(rowID), text("42"), text("order.created"), text(`{"a":1}`), text(rowCreatedAt), text(`{"k":"v"}`)},
			withRow(func(m *wire.Message) { m.AggregateType, m.Headers = "", map[string]any{"k": "v"} })},
	}
	for _, s := range steps {
		if s.cols != nil {
			mustSkip(t, d, relationMsg(outboxRelID, "public", "outbox", s.cols))
		}
		ev, err := d.Decode(testLSN, insertMsg(outboxRelID, s.vals...))
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := ev.Message; !reflect.DeepEqual(got, s.want) {
			t.Errorf("%s:\ngot  %+v\nwant %+v", s.name, got, s.want)
		}
	}
}

// TestDecodeCopiesData checks that a decoded row shares no memory with the caller's buffer.
func TestDecodeCopiesData(t *testing.T) {
	d := newDecoder(t, outboxCols)
	data := insertMsg(outboxRelID, setCol(outboxRow(`{"a":1}`), "headers", text(`{"k":"v"}`))...)
	ev, err := d.Decode(testLSN, data)
	if err != nil {
		t.Fatal(err)
	}
	before := fmt.Sprintf("%+v", ev.Message)
	for i := range data {
		data[i] = 'X'
	}
	if after := fmt.Sprintf("%+v", ev.Message); after != before {
		t.Errorf("message changed with the buffer:\nbefore %s\nafter  %s", before, after)
	}
}

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		err  *decoder.Error
		want string
	}{
		{&decoder.Error{LSN: testLSN, Err: decoder.ErrMalformed}, "decode at 0/16B3748: malformed pgoutput data"},
		{&decoder.Error{LSN: testLSN, MsgID: uuid.MustParse(rowID), Table: "public.outbox", Column: "payload",
			Err: fmt.Errorf("%w: payload is not JSON", decoder.ErrBadRow)},
			"decode at 0/16B3748 (msg " + rowID + ", table public.outbox, column payload): bad outbox row: payload is not JSON"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got  %q\nwant %q", got, tt.want)
		}
	}
}

// With WithSharedPayload, a row's payload is the caller's data, not a copy; the rest of the
// message still shares nothing with it.
func TestDecodeSharesPayloadWhenAsked(t *testing.T) {
	d := newDecoder(t, outboxCols).WithSharedPayload()
	data := insertMsg(outboxRelID, setCol(outboxRow(`{"a":1}`), "headers", text(`{"k":"v"}`))...)
	ev, err := d.Decode(testLSN, data)
	if err != nil {
		t.Fatal(err)
	}
	before := ev.Message
	before.Payload = nil
	want := fmt.Sprintf("%+v", before)
	for i := range data {
		data[i] = 'X'
	}
	if got := string(ev.Message.Payload); got != `XXXXXXX` {
		t.Errorf("payload %q after the buffer changed, want it to share the buffer", got)
	}
	ev.Message.Payload = nil
	if got := fmt.Sprintf("%+v", ev.Message); got != want {
		t.Errorf("message changed with the buffer:\nbefore %s\nafter  %s", want, got)
	}
}
