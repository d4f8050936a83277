package decoder_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/wire"
)

// A row read from the table becomes exactly the message, or the bad row, that the same row
// decoded from the stream becomes: walbox recover republishes through this path.
func TestTableRowsMatchDecode(t *testing.T) {
	tests := []struct {
		name    string
		mapping wire.Mapping
		cols    []col
		vals    []val
	}{
		{"the default table", wire.Mapping{Table: eventsTable}, outboxCols, outboxRow(`{"a":1}`)},
		{"every column mapped", eventsMapping, eventsCols, eventsRow()},
		{"NULL optional columns", eventsMapping, eventsCols, eventsVals("entity_id", null, "meta", null, "occurred_at", null)},
		{"headers of every JSON type", wire.Mapping{Table: eventsTable}, outboxCols,
			append(outboxRow(`{}`)[:5], text(`{"s":"x","n":1.5,"i":7,"b":true,"z":null,"a":[1,"2"],"o":{"k":"v"}}`), text(rowCreatedAt))},
		{"bad: NULL event type", eventsMapping, eventsCols, eventsVals("kind", null)},
		{"bad: payload not JSON", eventsMapping, eventsCols, eventsVals("body", text("nope"))},
		{"bad: routing key too long", eventsMapping, eventsCols, eventsVals("entity", text(strings.Repeat("e", 242)))},
		{"bad: created_at not a timestamp", eventsMapping, eventsCols, eventsVals("occurred_at", text("x"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newMappedDecoder(t, tt.mapping, tt.cols)
			ev, wantErr := d.Decode(0, insertMsg(eventsRelID, tt.vals...))
			rows, err := decoder.New(tt.mapping).Rows(tt.mapping.Table.Schema, tt.mapping.Table.Name, columns(tt.cols))
			if err != nil {
				t.Fatal(err)
			}
			got, gotErr := rows.Message(values(tt.vals))
			if wantErr != nil {
				if gotErr == nil || gotErr.Error() != wantErr.Error() || !decoder.IsBadRow(gotErr) {
					t.Fatalf("got error %v, want %v", gotErr, wantErr)
				}
				if g, w := asError(t, gotErr).Partial, asError(t, wantErr).Partial; !reflect.DeepEqual(g, w) {
					t.Errorf("partial:\ngot  %+v\nwant %+v", g, w)
				}
				return
			}
			if gotErr != nil {
				t.Fatal(gotErr)
			}
			if !reflect.DeepEqual(got, ev.Message) {
				t.Errorf("got  %+v\nwant %+v", got, ev.Message)
			}
		})
	}
}

func TestTableRowsRefuses(t *testing.T) {
	position := mapped(func(m *wire.Mapping) { m.MessageID = wire.IDFromPosition; m.ID = "" })
	tests := []struct {
		name    string
		mapping wire.Mapping
		table   wire.Table
		cols    []col
		want    error
	}{
		{"ids from positions", position, eventsTable, eventsCols, decoder.ErrNoPosition},
		{"a table that is not an outbox table", eventsMapping, wire.Table{Schema: "public", Name: "other"}, eventsCols,
			decoder.ErrForeignTable},
		{"a missing column", eventsMapping, eventsTable, eventsCols[1:], decoder.ErrSchemaDrift},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decoder.New(tt.mapping).Rows(tt.table.Schema, tt.table.Name, columns(tt.cols))
			if !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func columns(cols []col) []decoder.Column {
	out := make([]decoder.Column, len(cols))
	for i, c := range cols {
		out[i] = decoder.Column{Name: c.name, Type: c.oid}
	}
	return out
}

func values(vals []val) [][]byte {
	out := make([][]byte, len(vals))
	for i, v := range vals {
		if v.kind != 'n' {
			out[i] = []byte(v.data)
		}
	}
	return out
}
