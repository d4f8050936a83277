package consumer

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer/internal/handling"
	"github.com/walbox/walbox/wire"
)

// Defaults for the zero values of Config.
const (
	DefaultPrefetch            = 16
	DefaultMaxAttempts         = 5
	DefaultRetryBackoff        = time.Second
	DefaultRetryBackoffMax     = time.Minute
	DefaultReconnectBackoff    = 500 * time.Millisecond
	DefaultReconnectBackoffMax = 30 * time.Second
	DefaultShutdownTimeout     = 30 * time.Second
	DefaultProcessedTable      = "processed_messages"
	DefaultLeaseDuration       = 15 * time.Second
)

// MaxPartitions bounds Config.Partitions.
const MaxPartitions = 1024

// minLeaseDuration keeps a heartbeat, a third of the lease, above a database round trip.
const minLeaseDuration = 300 * time.Millisecond

// maxQueueName leaves room in an AMQP short string (255 bytes) for the retry queue suffixes.
const maxQueueName = 200

// Binding binds the queue to an exchange with a routing key pattern ("order.*", "#").
type Binding struct {
	Exchange string
	Key      string
	// AlternateExchange is the exchange's alternate-exchange argument. The consumer declares the
	// exchange exactly as walbox does, so that either may start first. It is durable and topic.
	// Its alternate exchange is wire.DefaultAlternateExchange(Exchange) unless set here. "none"
	// declares it without one (match `walbox run --alternate-exchange none`).
	AlternateExchange string
}

// Config configures a Consumer. The zero value of every field but AMQPURL and Queue selects its
// default.
type Config struct {
	// AMQPURL is the broker address, amqp://user:password@host:port/vhost or amqps://…
	// The password never appears in errors.
	AMQPURL string

	// Queue is the durable queue consumed. It is declared on every connect, with QueueArgs, and
	// bound as Bindings say.
	Queue string

	// QueueArgs are the arguments Queue is declared with ({"x-queue-type": "quorum"}, say).
	// With x-queue-type quorum the dead-letter and retry queues are quorum queues too. The retry
	// queues then dead-letter back to Queue at least once. A new quorum Queue and dead-letter
	// queue get x-delivery-limit 2147483647 unless QueueArgs sets one (see ErrNoDeliveryLimit).
	// They must match those of an existing queue; x-delivery-limit may be missing there.
	QueueArgs map[string]any

	// Bindings bind Queue to exchanges. Each exchange is declared as a durable topic exchange.
	// The relay declares its own the same way, so the consumer may start first.
	Bindings []Binding

	// Prefetch is how many unacknowledged deliveries the broker sends ahead (basic.qos).
	// Default 16 (DefaultPrefetch).
	Prefetch int

	// MaxAttempts is how often a message is handed to the handler before it is dead-lettered.
	// 1 means no retries. Default 5 (DefaultMaxAttempts).
	MaxAttempts int

	// RetryBackoff is the delay before the second attempt; each later one waits twice as long,
	// up to RetryBackoffMax. Defaults 1s and 1m (DefaultRetryBackoff, DefaultRetryBackoffMax).
	// Delays are whole milliseconds.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration

	// DeadLetterQueue receives messages that failed MaxAttempts times or cannot be handled at
	// all (no message id). Declared durable. Default Queue + ".dlq".
	DeadLetterQueue string

	// ProcessedTable is the table of handled message ids, "schema.name" or "name"
	// (migrations.ApplyConsumer creates the default). Default "processed_messages" (DefaultProcessedTable).
	ProcessedTable string

	// ConsumerName identifies this consumer in ProcessedTable, so that several consumers can
	// share one table and each handle every message once. It is also the AMQP consumer tag
	// and connection name. Default Queue.
	ConsumerName string

	// ReconnectBackoff is the delay before the first reconnect after a lost broker connection.
	// A database error waits it too. It doubles up to ReconnectBackoffMax. Defaults 500ms and
	// 30s (DefaultReconnectBackoff, DefaultReconnectBackoffMax).
	ReconnectBackoff    time.Duration
	ReconnectBackoffMax time.Duration

	// ShutdownTimeout bounds how long Run lets the in-flight handler finish after its context
	// ends. Then the handler's context is cancelled and the connection cut. Default 30s
	// (DefaultShutdownTimeout).
	ShutdownTimeout time.Duration

	// Partitions, above 0, spreads the messages over that many queues, each of one aggregate's
	// messages in one of them. The consumer declares a consistent-hash exchange "<Queue>.hash"
	// bound as Bindings say, hashing the header aggregate_id. It declares quorum queues
	// "<Queue>.p0" … with single active consumer, instead of Queue. Processes of one
	// ConsumerName share the partitions through leases in the database. A message that fails
	// holds back its aggregate's later ones, not the partition. See docs/outbox.md. Leases and
	// holds are per ConsumerName: give each partitioned queue a name of its own.
	// Partitioning needs the broker's plugin rabbitmq_consistent_hash_exchange. Run stops with
	// ErrPartitionsChanged when the database's leases are of another count.
	Partitions int

	// LeaseDuration is how long a process holds a partition without renewing it. Renewals come
	// every third of it; a process stops a partition it could not renew before the lease ends.
	// Another takes it over only after the lease ended. Default 15s (DefaultLeaseDuration).
	LeaseDuration time.Duration

	// OnError, if set, is called with every error Run recovers from. Such an error is a lost
	// connection, a failed database call, or a handler error (then a *MessageError). Run calls
	// it from its own goroutine. It must not block for long.
	OnError func(error)

	// Metrics, if set, is told what became of each message. Package consumer/consumermetrics
	// exports them to a Prometheus registry. Default none.
	Metrics Metrics
}

// Metrics is told what became of each message a consumer took. Its methods must be quick and
// safe for concurrent use. Package consumer/consumermetrics implements it.
type Metrics interface {
	// Handled: the handler of consumer handled d, and its transaction committed.
	Handled(consumer string, d Delivery)
	// Failed: an attempt of consumer at d failed, in the handler or the database.
	Failed(consumer string, d Delivery)
}

// noMetrics is the default Metrics.
type noMetrics struct{}

func (noMetrics) Handled(string, Delivery) {}
func (noMetrics) Failed(string, Delivery)  {}

// Validate reports the first bad setting of c. A zero field stands for its default, as in New.
// Validate changes nothing.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := checkURL(c.AMQPURL); err != nil {
		return err
	}
	if _, err := wire.ParseTable(c.ProcessedTable); err != nil {
		return fmt.Errorf("processed table: %w", err)
	}
	switch {
	case c.Queue == "":
		return errors.New("queue: empty")
	case len(c.Queue) > maxQueueName:
		return fmt.Errorf("queue %.20q...: longer than %d bytes", c.Queue, maxQueueName)
	case len(c.DeadLetterQueue) > 255:
		return fmt.Errorf("dead letter queue %.20q...: longer than 255 bytes", c.DeadLetterQueue)
	case c.DeadLetterQueue == c.Queue:
		return fmt.Errorf("dead letter queue %q: same as queue", c.DeadLetterQueue)
	case c.Prefetch < 0:
		return fmt.Errorf("prefetch %d: negative", c.Prefetch)
	case c.MaxAttempts < 0:
		return fmt.Errorf("max attempts %d: negative", c.MaxAttempts)
	case c.RetryBackoff < 0:
		return fmt.Errorf("retry backoff %s: negative", c.RetryBackoff)
	case c.RetryBackoffMax < c.RetryBackoff:
		return fmt.Errorf("retry backoff max %s: less than retry backoff %s", c.RetryBackoffMax, c.RetryBackoff)
	case c.ReconnectBackoff < 0:
		return fmt.Errorf("reconnect backoff %s: negative", c.ReconnectBackoff)
	case c.ReconnectBackoffMax < c.ReconnectBackoff:
		return fmt.Errorf("reconnect backoff max %s: less than reconnect backoff %s", c.ReconnectBackoffMax, c.ReconnectBackoff)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("shutdown timeout %s: negative", c.ShutdownTimeout)
	case c.Partitions < 0 || c.Partitions > MaxPartitions:
		return fmt.Errorf("partitions %d: want 0 (none) to %d", c.Partitions, MaxPartitions)
	case c.LeaseDuration < minLeaseDuration:
		return fmt.Errorf("lease duration %s: less than %s", c.LeaseDuration, minLeaseDuration)
	case c.Partitions > 0 && c.QueueArgs["x-queue-type"] != nil && !c.quorum():
		return fmt.Errorf("queue args: x-queue-type %v: partitions are quorum queues", c.QueueArgs["x-queue-type"])
	case len(c.ConsumerName) > maxQueueName:
		return fmt.Errorf("consumer name %.20q...: longer than %d bytes", c.ConsumerName, maxQueueName)
	}
	for i, b := range c.Bindings {
		if b.Exchange == "" {
			return fmt.Errorf("binding %d: exchange empty (the default exchange takes no bindings)", i)
		}
		if len(b.Exchange) > 255 || len(b.Key) > 255 {
			return fmt.Errorf("binding %d: exchange or key longer than 255 bytes", i)
		}
	}
	if err := amqp.Table(c.QueueArgs).Validate(); err != nil {
		return fmt.Errorf("queue args: %w", err)
	}
	return nil
}

// withDefaults returns c with each zero field set to its default.
func (c Config) withDefaults() Config {
	handling.SetDefault(&c.Prefetch, DefaultPrefetch)
	handling.SetDefault(&c.MaxAttempts, DefaultMaxAttempts)
	handling.SetDefault(&c.RetryBackoff, DefaultRetryBackoff)
	handling.SetDefault(&c.RetryBackoffMax, max(DefaultRetryBackoffMax, c.RetryBackoff))
	handling.SetDefault(&c.ReconnectBackoff, DefaultReconnectBackoff)
	handling.SetDefault(&c.ReconnectBackoffMax, max(DefaultReconnectBackoffMax, c.ReconnectBackoff))
	handling.SetDefault(&c.ShutdownTimeout, DefaultShutdownTimeout)
	handling.SetDefault(&c.ProcessedTable, DefaultProcessedTable)
	handling.SetDefault(&c.ConsumerName, c.Queue)
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	handling.SetDefault(&c.LeaseDuration, DefaultLeaseDuration)
	if c.DeadLetterQueue == "" && c.Queue != "" {
		c.DeadLetterQueue = c.Queue + ".dlq"
	}
	return c
}

// checkURL parses an AMQP URL; its error never contains the password.
func checkURL(raw string) error {
	if raw == "" {
		return errors.New("amqp url: empty")
	}
	if _, err := amqp.ParseURI(raw); err != nil {
		u, perr := url.Parse(raw)
		if perr != nil {
			return errors.New("amqp url: malformed")
		}
		msg := err.Error()
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
			msg = strings.ReplaceAll(msg, url.QueryEscape(p), "xxxxx")
		}
		return fmt.Errorf("amqp url: %s", msg)
	}
	return nil
}

// retryDelay is how long a message waits after failing attempt n (1-based). It is whole
// milliseconds: the retry queue's name and message TTL carry it so.
func (c *Config) retryDelay(attempt int) time.Duration {
	return handling.RetryDelay(c.RetryBackoff, c.RetryBackoffMax, attempt).Truncate(time.Millisecond)
}

// retryQueue names the queue a message waits d in before it returns to Queue.
func (c *Config) retryQueue(d time.Duration) string {
	return fmt.Sprintf("%s.retry.%dms", c.Queue, d.Milliseconds())
}
