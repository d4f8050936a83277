package publisher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/publisher/publishertest"
	"github.com/walbox/walbox/wire"
)

// TestPublisherContract runs the publisher conformance suite against a Session and against
// Lanes of three sessions, on a node of its own, since it raises alarms on it.
func TestPublisherContract(t *testing.T) {
	r := testenv.StartRabbit(t)
	testenv.RequireOwn(t, r)
	t.Run("Session", func(t *testing.T) {
		publishertest.Run(t, &rabbitHarness{r: r}, publishertest.Options{InOrder: true, Flushes: true})
	})
	t.Run("Lanes", func(t *testing.T) {
		publishertest.Run(t, &rabbitHarness{r: r, lanes: 3}, publishertest.Options{Flushes: true})
	})
}

// rabbitHarness dials each publisher through a proxy of its own, on an exchange of its own,
// where routing key "routed" reaches a queue, "nacked" a queue that refuses everything, and
// "returned" nothing (no alternate exchange).
type rabbitHarness struct {
	r     *testenv.Rabbit
	lanes int // 0: a Session

	mu      sync.Mutex
	proxies map[publishertest.Publisher]*proxy
}

func (h *rabbitHarness) Dial(t *testing.T) publishertest.Publisher {
	p, url := startProxy(t, h.r.URL())
	cfg := publisher.Config{URL: url, Exchange: testenv.UniqueName("outbox"), AlternateExchange: publisher.NoExchange,
		CloseTimeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var pub publishertest.Publisher
	if h.lanes == 0 {
		s, err := publisher.Dial(ctx, cfg)
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		pub = s
	} else {
		l, err := publisher.DialLanes(ctx, h.lanes, func(ctx context.Context) (*publisher.Session, error) {
			return publisher.Dial(ctx, cfg)
		})
		if err != nil {
			t.Fatalf("DialLanes: %v", err)
		}
		pub = l
	}
	t.Cleanup(func() { pub.Close() })
	ch := admin(t, h.r.URL())
	bindQueue(t, ch, cfg.Exchange, publishertest.Routed.String(), nil)
	bindQueue(t, ch, cfg.Exchange, publishertest.Nacked.String(), amqp.Table{"x-max-length": int64(0), "x-overflow": "reject-publish"})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proxies == nil {
		h.proxies = make(map[publishertest.Publisher]*proxy)
	}
	h.proxies[pub] = p
	return pub
}

func (h *rabbitHarness) proxy(p publishertest.Publisher) *proxy {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.proxies[p]
}

func (h *rabbitHarness) Message(_ *testing.T, k publishertest.Kind, aggregate string) *wire.Message {
	return publishertest.NewMessage(k.String(), aggregate)
}

func (h *rabbitHarness) Hold(_ *testing.T, p publishertest.Publisher) func() {
	px := h.proxy(p)
	px.down.pause()
	return px.down.resume
}

func (h *rabbitHarness) Cut(_ *testing.T, p publishertest.Publisher) { h.proxy(p).close() }

// Block raises a memory alarm. The broker blocks a connection when it next publishes, so it
// publishes on every lane until each knows it is blocked.
func (h *rabbitHarness) Block(t *testing.T, p publishertest.Publisher) (int, func()) {
	h.r.Ctl(t, "eval", setAlarm)
	var once sync.Once
	unblock := func() { once.Do(func() { h.r.Ctl(t, "eval", clearAlarm) }) }
	t.Cleanup(unblock)
	sessions := []*publisher.Session{}
	switch p := p.(type) {
	case *publisher.Session:
		sessions = append(sessions, p)
	case *publisher.Lanes:
		sessions = p.Sessions()
	}
	n := 0
	for _, s := range sessions {
		for i := 0; !s.Blocked(); i++ {
			if i%50 == 0 { // a message on every lane, now and then, until this one is blocked
				for lane := range sessions {
					m := publishertest.NewMessage(publishertest.Routed.String(), aggregateOn(lane, len(sessions)))
					if _, err := p.Publish(context.Background(), m); err != nil {
						t.Fatalf("Publish: %v", err)
					}
					n++
				}
			}
			time.Sleep(10 * time.Millisecond)
			if i > int(waitFor/(10*time.Millisecond)) {
				t.Fatal("not blocked")
			}
		}
	}
	return n, unblock
}

// aggregateOn returns an aggregate id that Lanes of n lanes puts on lane.
func aggregateOn(lane, n int) string {
	for i := 0; ; i++ {
		if id := string(rune('a'+i%26)) + string(rune('0'+i/26)); publisher.LaneOf(id, n) == lane {
			return id
		}
	}
}
