package wire_test

import (
	"strings"
	"testing"

	"github.com/walbox/walbox/wire"
)

func TestCheckColumns(t *testing.T) {
	full := map[string]string{
		"id": "uuid", "aggregate_type": "text", "aggregate_id": "text", "event_type": "text",
		"payload": "jsonb", "headers": "jsonb", "created_at": "timestamp with time zone",
	}
	without := func(cols ...string) map[string]string {
		m := map[string]string{}
		for k, v := range full {
			m[k] = v
		}
		for _, c := range cols {
			delete(m, c)
		}
		return m
	}
	with := func(col, typ string) map[string]string {
		m := without()
		m[col] = typ
		return m
	}
	legacy := wire.Mapping{Table: wire.Table{Schema: "app", Name: "events"}, Headers: "meta", EventType: "kind"}
	tests := []struct {
		name    string
		m       wire.Mapping
		actual  map[string]string
		wantErr string // empty: no error
	}{
		{"the default table passes", wire.Mapping{}, full, ""},
		{"default optional columns may be missing", wire.Mapping{},
			without("headers", "created_at", "aggregate_type", "aggregate_id"), ""},
		{"a missing event type is named", wire.Mapping{}, without("event_type"), `no column "event_type"`},
		{"a missing payload is named", wire.Mapping{}, without("payload"), `no column "payload"`},
		{"a missing id is named", wire.Mapping{}, without("id"), `no column "id"`},
		{"an explicitly mapped optional column must exist", legacy,
			map[string]string{"id": "uuid", "kind": "text", "payload": "jsonb"}, `no column "meta" (mapped as headers)`},
		{"a routing key placeholder must exist even if it is a default optional column",
			wire.Mapping{RoutingKey: "{aggregate_type}.{event_type}"}, without("aggregate_type"),
			`no column "aggregate_type"`},
		{"an id from the position needs no id column", wire.Mapping{MessageID: wire.IDFromPosition}, without("id"), ""},
		{"a deliver_at of timestamptz passes", wire.Mapping{}, with("deliver_at", "timestamp with time zone"), ""},
		{"a deliver_at without time zone is refused", wire.Mapping{}, with("deliver_at", "timestamp(3) without time zone"),
			`column "deliver_at" (deliver_at) is timestamp(3) without time zone`},
		{"a mapped deliver-at without time zone is refused", wire.Mapping{DeliverAt: "due"}, with("due", "timestamp without time zone"),
			`column "due" (deliver_at) is timestamp without time zone`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.m.CheckColumns(tt.actual)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
