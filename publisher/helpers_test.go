package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// waitFor bounds every wait in these tests.
const waitFor = 20 * time.Second

// dial opens a session on a fresh exchange, whose name it returns; Close is registered as
// cleanup.
func dial(tb testing.TB, url string, cfg publisher.Config) (*publisher.Session, string) {
	tb.Helper()
	cfg.URL = url
	if cfg.Exchange == "" {
		cfg.Exchange = testenv.UniqueName("outbox")
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := publisher.Dial(ctx, cfg)
	if err != nil {
		tb.Fatalf("Dial: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, cfg.Exchange
}

// admin is a plain amqp091 channel for setting up and inspecting queues.
func admin(tb testing.TB, url string) *amqp.Channel {
	tb.Helper()
	return testenv.Channel(tb, url)
}

// bindQueue declares an exclusive queue bound to exchange with key.
func bindQueue(tb testing.TB, ch *amqp.Channel, exchange, key string, args amqp.Table) string {
	tb.Helper()
	q, err := ch.QueueDeclare(testenv.UniqueName("q"), false, true, true, false, args)
	if err != nil {
		tb.Fatalf("declare queue: %v", err)
	}
	if err := ch.QueueBind(q.Name, key, exchange, false, nil); err != nil {
		tb.Fatalf("bind queue: %v", err)
	}
	return q.Name
}

func newMessage(eventType string) *wire.Message {
	return &wire.Message{
		ID:            uuid.New(),
		AggregateType: "order",
		AggregateID:   "42",
		EventType:     eventType,
		Payload:       []byte(`{"total":12.5}`),
		CreatedAt:     time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}
}

func publish(tb testing.TB, s *publisher.Session, m *wire.Message) uint64 {
	tb.Helper()
	seq, err := s.Publish(context.Background(), m)
	if err != nil {
		tb.Fatalf("Publish: %v", err)
	}
	return seq
}

// next reads one Confirm, failing the test if none comes in time or the channel is closed.
func next(tb testing.TB, s *publisher.Session) wire.Confirm {
	tb.Helper()
	select {
	case c, ok := <-s.Confirms():
		if !ok {
			tb.Fatal("Confirms closed")
		}
		return c
	case <-time.After(waitFor):
		tb.Fatal("no Confirm")
	}
	panic("unreachable")
}

// untilClosed reads Confirms until it is closed and returns the last one.
func untilClosed(tb testing.TB, s *publisher.Session) wire.Confirm {
	tb.Helper()
	var last wire.Confirm
	timeout := time.After(waitFor)
	for {
		select {
		case c, ok := <-s.Confirms():
			if !ok {
				return last
			}
			last = c
		case <-timeout:
			tb.Fatalf("Confirms not closed; last %+v", last)
		}
	}
}

// checkGoroutines fails if the goroutine count does not fall back to base.
func checkGoroutines(tb testing.TB, base int) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			tb.Fatalf("goroutines: got %d, want %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// proxy relays TCP to a broker and can stop relaying in either direction, as a stalled broker
// or network would: while paused, nothing is read, so the sender's socket buffers fill up.
type proxy struct {
	ln     net.Listener
	target string
	up     gate // client to broker
	down   gate // broker to client

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startProxy(tb testing.TB, brokerURL string) (*proxy, string) {
	tb.Helper()
	u, err := amqp.ParseURI(brokerURL)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &proxy{ln: ln, target: fmt.Sprintf("%s:%d", u.Host, u.Port)}
	p.up.init()
	p.down.init()
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.close)
	u.Host, u.Port = "127.0.0.1", ln.Addr().(*net.TCPAddr).Port // the proxy, not the broker's host
	return p, u.String()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, b)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.relay(b, c, &p.up)
		go p.relay(c, b, &p.down)
	}
}

func (p *proxy) relay(dst, src net.Conn, g *gate) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		g.wait()
		n, err := src.Read(buf)
		if n > 0 {
			g.wait()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				src.Close()
			}
			return
		}
	}
}

// close cuts every connection, then opens the gates: bytes a paused relay holds must not reach
// the other side after the cut.
func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.up.resume()
	p.down.resume()
	p.wg.Wait()
}

type gate struct {
	mu   sync.Mutex
	open chan struct{}
}

func (g *gate) init() {
	g.open = make(chan struct{})
	close(g.open)
}

func (g *gate) wait() {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	<-open
}

func (g *gate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *gate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}
