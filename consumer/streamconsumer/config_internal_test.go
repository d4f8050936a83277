package streamconsumer

import (
	"testing"
	"time"
)

// TestRetryDelayIsNotRounded: the stream consumer pauses the exact delay, unlike the queue
// consumer, which cuts it to whole milliseconds. Many attempts never wrap it below zero.
func TestRetryDelayIsNotRounded(t *testing.T) {
	cfg := Config{RetryBackoff: 1500 * time.Microsecond, RetryBackoffMax: 10 * time.Millisecond}
	for attempt, want := range map[int]time.Duration{1: 1500 * time.Microsecond, 2: 3 * time.Millisecond,
		3: 6 * time.Millisecond, 4: 10 * time.Millisecond} {
		if got := cfg.retryDelay(attempt); got != want {
			t.Errorf("attempt %d: %s, want %s", attempt, got, want)
		}
	}
	cfg = Config{RetryBackoff: 10 * time.Second, RetryBackoffMax: time.Hour}
	if got := cfg.retryDelay(31); got != time.Hour {
		t.Errorf("attempt 31: %s, want %s", got, time.Hour)
	}
}

// TestWithDefaultsLeavesTheConfigAlone: New works on a copy with the defaults filled in.
func TestWithDefaultsLeavesTheConfigAlone(t *testing.T) {
	cfg := Config{URIs: []string{"rabbitmq-stream://localhost:5552"}, Stream: "events", ConsumerName: "billing"}
	got := cfg.withDefaults()
	if cfg.OffsetTable != "" || cfg.OnError != nil {
		t.Errorf("withDefaults changed its receiver: %+v", cfg)
	}
	if got.OffsetTable != DefaultOffsetTable || got.DeadLetterStream != "events.dead" || got.OnError == nil ||
		got.MaxAttempts != 5 || got.RetryBackoff != time.Second || got.RetryBackoffMax != time.Minute ||
		got.ReconnectBackoff != 500*time.Millisecond {
		t.Errorf("defaults: %+v", got)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
}

// TestValidateTakesZeroFieldsAsDefaults: a config that leaves the offset table to New is valid,
// as the queue consumer's is; a bad table is still refused.
func TestValidateTakesZeroFieldsAsDefaults(t *testing.T) {
	cfg := Config{URIs: []string{"rabbitmq-stream://localhost:5552"}, Stream: "events", ConsumerName: "billing"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("a zero offset table: %v", err)
	}
	cfg.OffsetTable = "a.b.c"
	if err := cfg.Validate(); err == nil {
		t.Error("offset table a.b.c: no error")
	}
}

// TestValidateRefusesNegatives: a negative MaxAttempts skipped every attempt, and the dead
// letter's reason was nil: the first message panicked Run. Negative pauses are refused too, as
// by the queue consumer.
func TestValidateRefusesNegatives(t *testing.T) {
	ok := Config{URIs: []string{"rabbitmq-stream://localhost:5552"}, Stream: "events", ConsumerName: "billing"}
	for want, cfg := range map[string]Config{
		"max attempts -1: negative":       {MaxAttempts: -1},
		"retry backoff -1s: negative":     {RetryBackoff: -time.Second},
		"reconnect backoff -1s: negative": {ReconnectBackoff: -time.Second},
	} {
		cfg.URIs, cfg.Stream, cfg.ConsumerName = ok.URIs, ok.Stream, ok.ConsumerName
		if err := cfg.Validate(); err == nil || err.Error() != want {
			t.Errorf("Validate: %v, want %q", err, want)
		}
	}
}
