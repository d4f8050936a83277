package publisher_test

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestMessageProperties(t *testing.T) {
	m := &wire.Message{
		ID:            uuid.MustParse("0190d5c6-7a1e-7b2c-9d3e-4f5a6b7c8d9e"),
		AggregateType: "order",
		AggregateID:   "42",
		EventType:     "order.created",
		Payload:       []byte(`{"total":12.5}`),
		Headers:       map[string]any{"traceparent": traceparent},
		CreatedAt:     time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}
	got := publisher.Publishing(m, "walbox")
	want := amqp.Publishing{
		Headers: amqp.Table{
			"aggregate_type": "order",
			"aggregate_id":   "42",
			"traceparent":    traceparent,
		},
		ContentType:  "application/json",
		DeliveryMode: 2,
		MessageId:    "0190d5c6-7a1e-7b2c-9d3e-4f5a6b7c8d9e",
		Timestamp:    m.CreatedAt,
		Type:         "order.created",
		AppId:        "walbox",
		Body:         m.Payload,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Message:\ngot  %+v\nwant %+v", got, want)
	}
}

func TestMessageFromMappedTable(t *testing.T) {
	m := newMessage("order.created")
	m.MessageID, m.RoutingKey, m.Exchange = "42", "order.order.created", "orders"
	got := publisher.Publishing(m, "walbox")
	if got.MessageId != "42" || got.Type != "order.created" {
		t.Errorf("got message id %q, type %q; want 42, order.created", got.MessageId, got.Type)
	}
}

func TestParkedKeepsWhereTheMessageWasGoing(t *testing.T) {
	m := newMessage("order.created")
	m.MessageID, m.RoutingKey, m.Exchange = strings.Repeat("9", 300), "order.order.created", "orders"
	got := publisher.ParkedPublishing(&wire.Parked{Message: *m, Reason: "exchange missing"}, "walbox", 1<<20)
	if got.Headers[publisher.HeaderParkExchange] != "orders" ||
		got.Headers[publisher.HeaderParkRoutingKey] != "order.order.created" || got.MessageId != strings.Repeat("9", 255) {
		t.Errorf("got headers %v, message id %q", got.Headers, got.MessageId)
	}
	plain := publisher.ParkedPublishing(&wire.Parked{Message: *newMessage("order.created")}, "walbox", 1<<20)
	for _, h := range []string{publisher.HeaderParkExchange, publisher.HeaderParkRoutingKey} {
		if v, ok := plain.Headers[h]; ok {
			t.Errorf("header %s = %v on a message without its own exchange or key", h, v)
		}
	}
}

func TestMessageHeaders(t *testing.T) {
	tests := []struct {
		name     string
		in, want any
	}{
		{"string passes through", traceparent, traceparent},
		{"bool passes through", true, true},
		{"json number stays float64", 12.5, 12.5},
		{"integral json number stays float64", 3.0, 3.0},
		{"nil passes through", nil, nil},
		{"array becomes field array", []any{"a", 1.0, []any{false}}, []any{"a", 1.0, []any{false}}},
		{"object becomes table", map[string]any{"k": "v", "n": map[string]any{"x": nil}},
			amqp.Table{"k": "v", "n": amqp.Table{"x": nil}}},
		{"int becomes int64, not 32 bits", 1 << 40, int64(1 << 40)},
		{"uint32 becomes int64", uint32(7), int64(7)},
		{"huge uint64 becomes string", uint64(1 << 63), "9223372036854775808"},
		{"json.Number integer becomes int64", json.Number("9007199254740993"), int64(9007199254740993)},
		{"json.Number fraction becomes float64", json.Number("0.25"), 0.25},
		{"json.Number int64 max becomes int64", json.Number("9223372036854775807"), int64(math.MaxInt64)},
		{"json.Number int64 min becomes int64", json.Number("-9223372036854775808"), int64(math.MinInt64)},
		{"json.Number beyond int64 stays its text", json.Number("12345678901234567890"), "12345678901234567890"},
		{"json.Number 1e400 stays its text", json.Number("1e400"), "1e400"},
		{"json.Number with more digits than a double stays its text",
			json.Number("0.1000000000000000055511151231257827"), "0.1000000000000000055511151231257827"},
		{"json.Number 0.1 becomes float64", json.Number("0.1"), 0.1},
		{"json.Number in an array", []any{json.Number("9007199254740993"), json.Number("1e400")},
			[]any{int64(9007199254740993), "1e400"}},
		{"decoded int64 passes through", int64(9007199254740993), int64(9007199254740993)},
		{"float32 becomes float64", float32(0.5), 0.5},
		{"string slice becomes field array", []string{"a", "b"}, []any{"a", "b"}},
		{"other types become text", struct{ A int }{1}, "{1}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMessage("e")
			m.Headers = map[string]any{"h": tt.in}
			h := publisher.Publishing(m, "walbox").Headers
			if err := h.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := h["h"]; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("header: got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestMessageAggregateHeadersWin(t *testing.T) {
	m := newMessage("e")
	m.Headers = map[string]any{"aggregate_type": "forged", "aggregate_id": "forged"}
	h := publisher.Publishing(m, "walbox").Headers
	if h["aggregate_type"] != "order" || h["aggregate_id"] != "42" {
		t.Errorf("headers: got %v, want the row's aggregate", h)
	}
}

func TestMessageDoesNotModifyInput(t *testing.T) {
	m := newMessage("e")
	arr := []any{1.0}
	m.Headers = map[string]any{"a": arr, "o": map[string]any{"k": 1}}
	publisher.Publishing(m, "walbox")
	if len(m.Headers) != 2 || !reflect.DeepEqual(m.Headers["o"], map[string]any{"k": 1}) {
		t.Errorf("headers modified: %v", m.Headers)
	}
}

func BenchmarkMessage(b *testing.B) {
	m := newMessage("order.created")
	m.Headers = map[string]any{"traceparent": traceparent}
	b.ReportAllocs()
	for b.Loop() {
		_ = publisher.Publishing(m, "walbox")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     publisher.Config
		wantErr string // substring; "" for valid
	}{
		{"defaults are valid", publisher.Config{URL: "amqp://guest:guest@localhost/"}, ""},
		{"url is required", publisher.Config{}, "url"},
		{"url scheme is amqp or amqps", publisher.Config{URL: "http://localhost/"}, "url"},
		{"negative window", publisher.Config{URL: "amqp://h/", Window: -1}, "window"},
		{"window too large", publisher.Config{URL: "amqp://h/", Window: publisher.MaxWindow + 1}, "window"},
		{"long exchange", publisher.Config{URL: "amqp://h/", Exchange: strings.Repeat("x", 256)}, "exchange"},
		{"negative dial timeout", publisher.Config{URL: "amqp://h/", DialTimeout: -time.Second}, "dial timeout"},
		{"negative heartbeat", publisher.Config{URL: "amqp://h/", Heartbeat: -time.Second}, "heartbeat"},
		{"negative close timeout", publisher.Config{URL: "amqp://h/", CloseTimeout: -time.Second}, "close timeout"},
		{"long app id", publisher.Config{URL: "amqp://h/", AppID: strings.Repeat("x", 256)}, "app id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)):
				t.Errorf("Validate: got %v, want an error naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg := publisher.Config{URL: "amqp://localhost/"}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Exchange != "outbox" || cfg.Window != 1024 || cfg.AppID != "walbox" ||
		cfg.DialTimeout <= 0 || cfg.Heartbeat <= 0 || cfg.CloseTimeout <= 0 {
		t.Errorf("defaults: %+v", cfg)
	}
}

func TestMalformedURLHidesPassword(t *testing.T) {
	const secret = "s3cr3t-PW"
	for _, url := range []string{
		"amqp://guest:" + secret + "@localhost:notaport/",
		"amqp://guest:" + secret + "@local host/",
		"amqp://guest:" + secret + "/x@localhost/", // unescaped '/' in the password
		"amqp://guest:" + secret + "%zz@localhost/",
		"amqps://guest:" + secret + "@localhost/?heartbeat=x",
	} {
		cfg := publisher.Config{URL: url}
		err := cfg.Validate()
		if err == nil {
			t.Errorf("Validate(%q): no error", url)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Validate: error shows the password: %v", err)
		}
	}
}

func TestMessageCarriesItsCommitTime(t *testing.T) {
	m := newMessage("e")
	if _, ok := publisher.Publishing(m, "walbox").Headers[wire.HeaderCommitTime]; ok {
		t.Fatal("a message without a commit time got the header")
	}
	m.CommitTime = time.Date(2026, 11, 28, 7, 30, 1, 123456789, time.FixedZone("x", 3600))
	v := publisher.Publishing(m, "walbox").Headers[wire.HeaderCommitTime]
	if v != "2026-11-28T06:30:01.123456Z" {
		t.Fatalf("header %s: got %#v, want the commit time in UTC, to the microsecond", wire.HeaderCommitTime, v)
	}
	got, ok := wire.ParseCommitTime(v)
	if !ok || !got.Equal(m.CommitTime.Truncate(time.Microsecond)) {
		t.Fatalf("ParseCommitTime(%v) = %v, %v; want %v", v, got, ok, m.CommitTime)
	}
}
