package e2e_test

import (
	"context"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/wire"
)

// exactHeaders has a header of each kind of docs/messages.md; wantHeaders is what a consumer
// receives for them.
const exactHeaders = `{"max": 9223372036854775807, "min": -9223372036854775808, "p53": 9007199254740993,
	"big": 12345678901234567890, "half": 0.5, "tenth": 0.1,
	"long_fraction": 0.1000000000000000055511151231257827,
	"nested": {"n": 9007199254740993, "l": [1, 2.5, "s", true, null]}, "s": "text", "b": false, "z": null}`

var wantHeaders = amqp.Table{
	"aggregate_type": "order", "aggregate_id": "42",
	"max": int64(math.MaxInt64), "min": int64(math.MinInt64), "p53": int64(9007199254740993),
	"big": "12345678901234567890", "half": 0.5, "tenth": 0.1,
	"long_fraction": "0.1000000000000000055511151231257827",
	"nested":        amqp.Table{"n": int64(9007199254740993), "l": []any{int64(1), 2.5, "s", true, nil}},
	"s":             "text", "b": false, "z": nil,
}

// hugeHeaders is valid jsonb that no float64 holds. jsonb stores numbers as numeric and writes
// 1e400 back in full, so that is the text that arrives.
const hugeHeaders = `{"huge": 1e400, "tiny": -1e-400}`

var wantHugeHeaders = amqp.Table{
	"aggregate_type": "order", "aggregate_id": "42",
	"huge": "1" + strings.Repeat("0", 400), "tiny": "-0." + strings.Repeat("0", 399) + "1",
}

// A row and an emitted message carry their headers' values exactly; a row with a header of
// walbox's own prefix is parked with the reason, and the stream goes on.
func TestHeadersArriveExactly(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	ctx := context.Background()
	want := map[uuid.UUID]amqp.Table{}
	for _, h := range []struct {
		headers string
		want    amqp.Table
	}{{exactHeaders, wantHeaders}, {hugeHeaders, wantHugeHeaders}} {
		rowID, emitID := uuid.New(), uuid.New()
		mustExec(t, w, `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, headers)
			VALUES ($1, 'order', '42', 'order.created', '{}', $2)`, rowID, h.headers)
		mustExec(t, w, `SELECT walbox_emit('order', '42', 'order.created', '{}', $1, $2)`, h.headers, emitID)
		want[rowID], want[emitID] = h.want, h.want
	}
	var forged, forgedCaps string
	for _, p := range []struct {
		id      *string
		headers string
	}{{&forged, `{"x-walbox-error": "forged", "tenant": "acme"}`}, {&forgedCaps, `{"X-Walbox-Attempts": 9}`}} {
		if err := w.conn.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers)
			VALUES ('order', '7', 'order.created', '{}', $1) RETURNING id::text`, p.headers).Scan(p.id); err != nil {
			t.Fatal(err)
		}
	}
	last := w.insertTx(w.conn, 1, "order.created")

	w.startRelay()
	// Messages arrive in commit order: once the last row is in, every one before it is too.
	got := w.drain([]txn{last}, nil, time.Minute)
	byID := map[string]amqp.Delivery{}
	for _, d := range got {
		byID[d.MessageId] = d
	}
	for id, h := range want {
		d, ok := byID[id.String()]
		if !ok {
			t.Errorf("message %s was not delivered", id)
			continue
		}
		checkHeaders(t, id.String(), d.Headers, h)
	}

	waitForLSN(t, w, func(l pglogrepl.LSN) bool { return l > last.before })
	reasons := map[string]string{}
	for _, d := range w.queueMessages(w.exchange+".parked", 2) {
		reasons[d.MessageId], _ = d.Headers["x-walbox-reason"].(string)
	}
	for id, name := range map[string]string{forged: "x-walbox-error", forgedCaps: "X-Walbox-Attempts"} {
		if r := reasons[id]; !strings.Contains(r, name) || !strings.Contains(r, "reserved") {
			t.Errorf("row %s with header %s parked with reason %q, want it to name the header as reserved", id, name, r)
		}
	}
	for _, d := range got {
		if d.MessageId == forged || d.MessageId == forgedCaps {
			t.Errorf("row %s with a forged x-walbox- header was delivered to the consumers' queue", d.MessageId)
		}
	}
}

func mustExec(t *testing.T, w *world, sql string, args ...any) {
	t.Helper()
	if _, err := w.conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// checkHeaders compares each header's value and Go type, as amqp091 decoded it.
func checkHeaders(t *testing.T, id string, got, want amqp.Table) {
	t.Helper()
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("message %s: header %s = %#v (%T), want %#v (%T)", id, k, got[k], got[k], v, v)
		}
	}
	// The relay adds the commit time of the row's transaction to every message.
	if _, ok := wire.ParseCommitTime(got[wire.HeaderCommitTime]); !ok {
		t.Errorf("message %s: header %s = %#v, want the commit time", id, wire.HeaderCommitTime, got[wire.HeaderCommitTime])
	}
	for k := range got {
		if _, ok := want[k]; !ok && k != wire.HeaderCommitTime {
			t.Errorf("message %s: unexpected header %s = %#v", id, k, got[k])
		}
	}
}
