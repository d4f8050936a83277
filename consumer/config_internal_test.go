package consumer

import (
	"reflect"
	"testing"
	"time"
)

// TestConfigDefaults: New fills each zero field with its default.
func TestConfigDefaults(t *testing.T) {
	cfg := Config{AMQPURL: "amqp://guest:guest@localhost:5672/", Queue: "orders"}
	want := Config{
		AMQPURL:             cfg.AMQPURL,
		Queue:               "orders",
		Prefetch:            16,
		MaxAttempts:         5,
		RetryBackoff:        time.Second,
		RetryBackoffMax:     time.Minute,
		DeadLetterQueue:     "orders.dlq",
		ProcessedTable:      "processed_messages",
		ConsumerName:        "orders",
		ReconnectBackoff:    500 * time.Millisecond,
		ReconnectBackoffMax: 30 * time.Second,
		ShutdownTimeout:     30 * time.Second,
	}
	if got := cfg.withDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}
