package replication_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/walbox/walbox/publisher/publishertest"
	"github.com/walbox/walbox/wire"
)

// The relay's tests stand on the fake behaving as a publisher does.
// It runs the publisher conformance suite, as Session and Lanes do against RabbitMQ.
func TestFakeKeepsThePublisherContract(t *testing.T) {
	publishertest.Run(t, &fakeHarness{}, publishertest.Options{InOrder: true, Flushes: true})
}

// fakeHarness gives each publisher a fake broker of its own, which confirms once flushed.
// It nacks messages of kind Nacked and refuses those of kind Returned.
type fakeHarness struct {
	mu      sync.Mutex
	brokers map[publishertest.Publisher]*fakeBroker
}

func (h *fakeHarness) Dial(t *testing.T) publishertest.Publisher {
	b := newFakeBroker(true)
	b.keepUntilFlush = true
	b.reject = func(m *wire.Message) bool { return m.EventType != publishertest.Routed.String() }
	p, err := b.dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.brokers == nil {
		h.brokers = make(map[publishertest.Publisher]*fakeBroker)
	}
	h.brokers[p] = b
	return p
}

func (h *fakeHarness) broker(p publishertest.Publisher) *fakeBroker {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.brokers[p]
}

func (h *fakeHarness) Message(_ *testing.T, k publishertest.Kind, aggregate string) *wire.Message {
	return publishertest.NewMessage(k.String(), aggregate)
}

func (h *fakeHarness) Hold(_ *testing.T, p publishertest.Publisher) func() {
	b := h.broker(p)
	b.mu.Lock()
	b.auto = false
	b.mu.Unlock()
	return b.ackAll
}

func (h *fakeHarness) Cut(_ *testing.T, p publishertest.Publisher) {
	h.broker(p).kill(fmt.Errorf("fake: %w: connection cut", wire.ErrSessionClosed))
}

func (h *fakeHarness) Block(_ *testing.T, p publishertest.Publisher) (int, func()) {
	b := h.broker(p)
	b.block()
	return 0, b.unblock
}
