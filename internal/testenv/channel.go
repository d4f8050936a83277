package testenv

import amqp "github.com/rabbitmq/amqp091-go"

// Channel opens a channel on the broker at url, on a connection of its own. tb.Cleanup closes the
// connection.
func Channel(tb TB, url string) *amqp.Channel {
	tb.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		tb.Fatalf("testenv: dial the broker: %v", err)
	}
	tb.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatalf("testenv: open a channel: %v", err)
	}
	return ch
}

// Bind declares a queue of the test's own, exclusive to ch's connection, and binds it to exchange
// with key. It returns the queue's deliveries, acknowledged on delivery.
func Bind(tb TB, ch *amqp.Channel, exchange, key string) <-chan amqp.Delivery {
	tb.Helper()
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		tb.Fatalf("testenv: declare a queue: %v", err)
	}
	if err := ch.QueueBind(q.Name, key, exchange, false, nil); err != nil {
		tb.Fatalf("testenv: bind a queue to %s: %v", exchange, err)
	}
	ds, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		tb.Fatalf("testenv: consume %s: %v", q.Name, err)
	}
	return ds
}
