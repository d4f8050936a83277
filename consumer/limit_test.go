package consumer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/internal/testenv"
)

// refuseProcessedAs makes every insert into processed_messages fail with SQLSTATE code while
// refuse has a row, as a database failing over would (P0001) or a revoked privilege (42501).
// The sequence refusals counts the failures.
func refuseProcessedAs(code string) string {
	return `
CREATE SEQUENCE refusals;
CREATE TABLE refuse (on_ boolean);
CREATE FUNCTION refuse_processed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM refuse) THEN
		PERFORM nextval('refusals');
		RAISE EXCEPTION 'refused for the test' USING ERRCODE = '` + code + `';
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER refuse BEFORE INSERT ON processed_messages FOR EACH ROW EXECUTE FUNCTION refuse_processed();
INSERT INTO refuse VALUES (true)`
}

func (e *env) refusals(tb testing.TB) int {
	tb.Helper()
	return e.count(tb, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM refusals")
}

func (e *env) exec(tb testing.TB, sql string) {
	tb.Helper()
	if _, err := e.pool.Exec(context.Background(), sql); err != nil {
		tb.Fatal(err)
	}
}

// publishToQueue publishes a message with id straight to queue, through the default exchange.
func publishToQueue(tb testing.TB, ch *amqp.Channel, queue, id string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
		MessageId: id, Type: "order.created", DeliveryMode: amqp.Persistent, Body: []byte(`{}`),
	})
	if err != nil {
		tb.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		tb.Fatalf("publish %s: not confirmed (%v)", id, err)
	}
}

// wantHandledOnce waits for id's one effect, then checks that the queue is empty.
func (e *env) wantHandledOnce(tb testing.TB, id string) {
	tb.Helper()
	eventually(tb, time.Minute, id+" handled", func() bool {
		return e.count(tb, "SELECT count(*) FROM effects WHERE message_id = $1", id) > 0
	})
	time.Sleep(200 * time.Millisecond)
	if n := e.count(tb, "SELECT count(*) FROM effects WHERE message_id = $1", id); n != 1 {
		tb.Errorf("%s handled %d times, want 1", id, n)
	}
}

// RabbitMQ 4.0 drops a quorum queue's message returned more than 20 times: its default delivery
// limit. Neither a database down for a while nor many lost sessions may drop one.
func TestQuorumQueueMessageOutlivesManyReturnsOnRabbitMQ40(t *testing.T) {
	skipShort(t)
	r := testenv.StartRabbit(t, testenv.RabbitVersion("4.0"))
	quorum := map[string]any{"x-queue-type": "quorum"}

	// Each try meets a database error. The consumer tries again, 25 times and more. It holds
	// the delivery meanwhile, so that even a queue without the limit keeps it.
	for _, existing := range []bool{false, true} {
		name := "database errors"
		if existing {
			name += ", existing queue without a limit"
		}
		t.Run(name, func(t *testing.T) { testDatabaseErrors(t, r, existing) })
	}

	// Each session ends on a fatal database error, which returns the message to the queue.
	t.Run("sessions ended", func(t *testing.T) {
		e := newEnv(t, r)
		e.exec(t, refuseProcessedAs("42501"))
		cfg := e.config()
		cfg.QueueArgs = quorum
		c, err := consumer.New(e.pool, cfg, recordEffect)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(context.Background()) }()
		e.waitConsuming(t)
		e.publish(t, "m1", "order.created")
		select {
		case err := <-done:
			if !consumer.Fatal(err) {
				t.Fatalf("Run: %v, want the refusal, fatal", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not stop on the refusal")
		}
		for i := 2; i <= 25; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := c.Run(ctx)
			cancel()
			if !consumer.Fatal(err) {
				t.Fatalf("session %d: Run: %v; the queue dropped the message after %d returns", i, err, e.refusals(t))
			}
		}
		e.exec(t, "DELETE FROM refuse")
		start(t, c)
		e.wantHandledOnce(t, "m1")
	})
}

// testDatabaseErrors has the consumer of a quorum queue meet 25 database errors and more before
// it handles a message. With existing, the queue exists without x-delivery-limit.
func testDatabaseErrors(t *testing.T, r *testenv.Rabbit, existing bool) {
	e := newEnv(t, r)
	e.exec(t, refuseProcessedAs("P0001"))
	quorum := map[string]any{"x-queue-type": "quorum"}
	if existing {
		if _, err := e.ch.QueueDeclare(e.queue, true, false, false, false, quorum); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.config()
	cfg.QueueArgs = quorum
	cfg.ReconnectBackoff, cfg.ReconnectBackoffMax = 10*time.Millisecond, 20*time.Millisecond
	c, err := consumer.New(e.pool, cfg, recordEffect)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	e.waitConsuming(t)
	e.publish(t, "m1", "order.created")
	eventually(t, time.Minute, "25 refusals", func() bool { return e.refusals(t) >= 25 })
	e.exec(t, "DELETE FROM refuse")
	e.wantHandledOnce(t, "m1")
}

// An operator reads dead letters and puts them back (a nack with requeue) more than 20 times.
// RabbitMQ 4.0 would drop them from a quorum queue with the default delivery limit.
func TestDeadLettersOutliveManyReturnsOnRabbitMQ40(t *testing.T) {
	skipShort(t)
	e := newEnv(t, testenv.StartRabbit(t, testenv.RabbitVersion("4.0")))
	cfg := e.config()
	cfg.QueueArgs = map[string]any{"x-queue-type": "quorum"}
	cfg.MaxAttempts = 1
	c, err := consumer.New(e.pool, cfg, func(context.Context, pgx.Tx, consumer.Delivery) error { return errors.New("boom") })
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	e.waitConsuming(t)
	e.publish(t, "m1", "order.created")
	dlq := e.queue + ".dlq"
	eventually(t, 30*time.Second, "a dead letter", func() bool { return e.readyMessages(t, dlq) == 1 })
	for i := 1; i <= 25; i++ {
		d, ok, err := e.ch.Get(dlq, false)
		if err != nil || !ok {
			t.Fatalf("read %d: %v; the dead-letter queue dropped m1 after %d returns", i, err, i-1)
		}
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	if d := e.getDeadLetter(t, dlq); d.MessageId != "m1" {
		t.Errorf("dead letter %q, want m1", d.MessageId)
	}
}

// Walbox declares a new quorum queue with x-delivery-limit. RabbitMQ 3.10 and 4.0 refuse another
// limit for an existing queue (PRECONDITION_FAILED). A queue that exists without one is used as
// it is, with a warning naming the policy to set.
func TestExistingQuorumQueueWithoutDeliveryLimit(t *testing.T) {
	skipShort(t)
	for _, v := range []string{"3.10", "4.0"} {
		t.Run(v, func(t *testing.T) {
			var r *testenv.Rabbit
			if v != "3.10" {
				r = testenv.StartRabbit(t, testenv.RabbitVersion(v))
			}
			e := newEnv(t, r)
			quorum := amqp.Table{"x-queue-type": "quorum"}
			for _, q := range []string{e.queue, e.queue + ".dlq"} {
				if _, err := e.ch.QueueDeclare(q, true, false, false, false, quorum); err != nil {
					t.Fatal(err)
				}
			}
			publishToQueue(t, e.ch, e.queue, "m1")
			var errs errorLog
			cfg := e.config()
			cfg.QueueArgs = quorum
			cfg.OnError = errs.add
			c, err := consumer.New(e.pool, cfg, recordEffect)
			if err != nil {
				t.Fatal(err)
			}
			stop := start(t, c)
			e.wantHandledOnce(t, "m1")
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			var warned []string
			for _, err := range errs.all() {
				if errors.Is(err, consumer.ErrNoDeliveryLimit) {
					warned = append(warned, err.Error())
				}
			}
			if len(warned) != 2 || !strings.Contains(warned[0], "set_policy") || !strings.Contains(warned[0], "'^"+e.queue+"$'") {
				t.Errorf("warnings %q, want two, one naming the policy for %s", warned, e.queue)
			}
			// Both are as they were: without a limit.
			for _, q := range []string{e.queue, e.queue + ".dlq"} {
				if _, err := openChannel(t, e.amqpURL).QueueDeclare(q, true, false, false, false, quorum); err != nil {
					t.Errorf("queue %s changed: %v", q, err)
				}
			}
			// Deleted, they are declared anew with the limit, when Run runs again.
			for _, q := range []string{e.queue, e.queue + ".dlq"} {
				if _, err := e.ch.QueueDelete(q, false, false, false); err != nil {
					t.Fatal(err)
				}
			}
			start(t, c)
			e.waitConsuming(t)
			e.wantLimit(t, e.queue, e.queue+".dlq")
		})
	}
}

// A new quorum queue, and its dead-letter queue, get x-delivery-limit 2147483647.
func TestNewQuorumQueueHasNoDeliveryLimit(t *testing.T) {
	e := newEnv(t, nil)
	cfg := e.config()
	cfg.QueueArgs = map[string]any{"x-queue-type": "quorum"}
	c, err := consumer.New(e.pool, cfg, recordEffect)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	e.waitConsuming(t)
	e.wantLimit(t, e.queue, e.queue+".dlq")
}

// wantLimit fails the test unless each queue has x-delivery-limit 2147483647: declaring it so
// does not fail.
func (e *env) wantLimit(tb testing.TB, queues ...string) {
	tb.Helper()
	limited := amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(1<<31 - 1)}
	for _, q := range queues {
		if _, err := openChannel(tb, e.amqpURL).QueueDeclare(q, true, false, false, false, limited); err != nil {
			tb.Errorf("queue %s: %v, want x-delivery-limit 2147483647", q, err)
		}
	}
}
