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
		LeaseDuration:       15 * time.Second,
		Metrics:             noMetrics{},
	}
	if got := cfg.withDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// TestRetryDelayIsWholeMilliseconds: the queue consumer cuts each delay to whole milliseconds,
// as its retry queue names carry it. The stream consumer does not (its retryDelay test).
func TestRetryDelayIsWholeMilliseconds(t *testing.T) {
	cfg := Config{RetryBackoff: 1500 * time.Microsecond, RetryBackoffMax: 10 * time.Millisecond}
	for attempt, want := range map[int]time.Duration{1: time.Millisecond, 2: 3 * time.Millisecond, 3: 6 * time.Millisecond, 4: 10 * time.Millisecond} {
		if got := cfg.retryDelay(attempt); got != want {
			t.Errorf("attempt %d: %s, want %s", attempt, got, want)
		}
	}
}
