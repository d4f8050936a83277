package consumer_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walbox/walbox/consumer"
)

// TestValidateChangesNothing: Validate checks a copy. The caller's config keeps its zero fields.
func TestValidateChangesNothing(t *testing.T) {
	cfg := consumer.Config{AMQPURL: "amqp://guest:guest@localhost:5672/", Queue: "orders"}
	before := cfg
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, before) {
		t.Errorf("Validate changed the config:\ngot  %+v\nwant %+v", cfg, before)
	}
}

func TestConfigValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(c *consumer.Config)
		want   string // in the error
	}{
		{"no url", func(c *consumer.Config) { c.AMQPURL = "" }, "amqp url"},
		{"bad url", func(c *consumer.Config) { c.AMQPURL = "http://u:secret@host/" }, "amqp url"},
		{"no queue", func(c *consumer.Config) { c.Queue = "" }, "queue"},
		{"long queue", func(c *consumer.Config) { c.Queue = strings.Repeat("q", 201) }, "queue"},
		{"dead letter queue is the queue", func(c *consumer.Config) { c.DeadLetterQueue = c.Queue }, "dead letter queue"},
		{"negative prefetch", func(c *consumer.Config) { c.Prefetch = -1 }, "prefetch"},
		{"negative attempts", func(c *consumer.Config) { c.MaxAttempts = -1 }, "max attempts"},
		{"negative backoff", func(c *consumer.Config) { c.RetryBackoff = -time.Second }, "retry backoff"},
		{"max below backoff", func(c *consumer.Config) { c.RetryBackoff, c.RetryBackoffMax = time.Minute, time.Second }, "retry backoff max"},
		{"max below the default backoff", func(c *consumer.Config) { c.RetryBackoffMax = time.Millisecond }, "retry backoff max"},
		{"reconnect max below the default", func(c *consumer.Config) { c.ReconnectBackoffMax = time.Millisecond }, "reconnect backoff max"},
		{"bad processed table", func(c *consumer.Config) { c.ProcessedTable = "a.b.c" }, "processed table"},
		{"binding to default exchange", func(c *consumer.Config) { c.Bindings = []consumer.Binding{{Key: "x"}} }, "binding 0"},
		{"bad queue args", func(c *consumer.Config) { c.QueueArgs = map[string]any{"x": struct{}{}} }, "queue args"},
		{"negative partitions", func(c *consumer.Config) { c.Partitions = -1 }, "partitions -1"},
		{"too many partitions", func(c *consumer.Config) { c.Partitions = consumer.MaxPartitions + 1 }, "partitions"},
		{"classic partitions", func(c *consumer.Config) {
			c.Partitions, c.QueueArgs = 4, map[string]any{"x-queue-type": "classic"}
		}, "partitions are quorum queues"},
		{"short lease", func(c *consumer.Config) { c.LeaseDuration = time.Millisecond }, "lease duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := consumer.Config{AMQPURL: "amqp://u:secret@localhost/", Queue: "orders"}
			tc.modify(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error about %s", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

func TestNewRejectsMissingParts(t *testing.T) {
	cfg := consumer.Config{AMQPURL: "amqp://localhost/", Queue: "orders"}
	h := func(context.Context, pgx.Tx, consumer.Delivery) error { return nil }
	if _, err := consumer.New(nil, cfg, h); err == nil {
		t.Error("New with a nil pool: no error")
	}
	pool, err := pgxpool.New(context.Background(), "postgres://localhost/none") // connects lazily
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := consumer.New(pool, cfg, nil); err == nil {
		t.Error("New with a nil handler: no error")
	}
	if _, err := consumer.New(pool, consumer.Config{}, h); err == nil {
		t.Error("New with an empty config: no error")
	}
}
