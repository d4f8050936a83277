package examplee2e_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/walbox/walbox/examples/orders"
	"github.com/walbox/walbox/internal/testenv"
)

const deliveryTimeout = 90 * time.Second

// The dual-write gap: an order written without its outbox message is never announced. Written
// through the outbox, the next order is.
func TestDualWriteGapAndTheOutboxClosingIt(t *testing.T) {
	s := newSystem(t, testenv.SharedRabbit(t))
	s.startRelay()
	s.startNotifier()

	// The naive service: it commits the order and "forgets" (crashes before) the publish.
	lost := uuid.New()
	if _, err := s.pool.Exec(context.Background(), `INSERT INTO orders (id, customer_id, amount_cents, status)
		VALUES ($1, $2, 500, 'created')`, lost, uuid.New()); err != nil {
		t.Fatal(err)
	}
	o := s.placeOrder(uuid.NewString(), 700)

	// Messages are relayed and consumed in commit order: once the later order is notified,
	// the earlier one would have been, had anything announced it.
	s.waitNotified(1, deliveryTimeout)
	time.Sleep(time.Second) // and nothing else arrives meanwhile
	if n := s.count("SELECT count(*) FROM notifications WHERE order_id = $1", lost); n != 0 {
		t.Errorf("order written without an outbox message was notified %d times", n)
	}
	if n := s.count("SELECT count(*) FROM notifications WHERE order_id = $1", o.ID.UUID); n != 1 {
		t.Errorf("order placed through the outbox was notified %d times, want 1", n)
	}
	t.Logf("order %s (no outbox row): never notified; order %s (outbox): notified", lost, o.ID)
}

// Orders placed over HTTP reach the notifier with the right payload, exactly once each, while
// the relay is SIGKILLed and restarted, replaying what it published but had not checkpointed;
// with the messages written as outbox rows and without rows, through walbox_emit.
func TestOrdersNotifiedExactlyOnceAcrossRelayCrash(t *testing.T) {
	t.Run("table", func(t *testing.T) { testNotifiedAcrossRelayCrash(t, 100) })
	t.Run("emit", func(t *testing.T) { testNotifiedAcrossRelayCrash(t, 0, orders.EmitMessages()) })
}

func testNotifiedAcrossRelayCrash(t *testing.T, wantRows int, opts ...orders.StoreOption) {
	s := newSystemWith(t, testenv.SharedRabbit(t), opts...)
	relay := s.startRelay()
	s.startNotifier()

	placed := s.placeConcurrently(40)
	s.waitNotified(1, deliveryTimeout)
	relay.Kill()
	placed = append(placed, s.placeConcurrently(40)...)
	s.startRelay()
	placed = append(placed, s.placeConcurrently(20)...)

	s.waitNotified(len(placed), deliveryTimeout)
	time.Sleep(time.Second) // let any duplicate land
	s.checkNotifiedOnce(placed)
	if n := s.count("SELECT count(*) FROM outbox"); n != wantRows {
		t.Errorf("%d outbox rows, want %d", n, wantRows)
	}
}

// A broker crash loses nothing: orders placed while it is down are notified after it
// restarts, each once, and the orders themselves are untouched.
func TestBrokerCrashLosesNothing(t *testing.T) {
	rabbit := testenv.StartRabbit(t)
	testenv.RequireOwn(t, rabbit)
	s := newSystem(t, rabbit)
	s.startRelay()
	s.startNotifier()

	placed := s.placeConcurrently(30)
	s.waitNotified(1, deliveryTimeout)
	rabbit.Kill(t)
	placed = append(placed, s.placeConcurrently(30)...) // the order API needs only the database
	rabbit.Start(t)
	placed = append(placed, s.placeConcurrently(10)...)

	s.waitNotified(len(placed), deliveryTimeout)
	time.Sleep(time.Second)
	s.checkNotifiedOnce(placed)
	s.checkOrdersUntouched(placed)
}

// placeConcurrently places n orders over HTTP from four clients and returns them.
func (s *system) placeConcurrently(n int) []orders.Order {
	s.t.Helper()
	out := make([]orders.Order, n)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				out[i] = s.placeOrder(uuid.NewString(), int64(100+i))
			}
		})
	}
	wg.Wait()
	return out
}

// checkNotifiedOnce checks that the notifications table holds exactly one row per placed
// order, with the order's customer and amount, and nothing else.
func (s *system) checkNotifiedOnce(placed []orders.Order) {
	s.t.Helper()
	rows, err := s.pool.Query(context.Background(),
		"SELECT order_id, customer_id, amount_cents FROM notifications")
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	seen := map[uuid.UUID]int{}
	want := map[uuid.UUID]orders.Order{}
	for _, o := range placed {
		want[o.ID.UUID] = o
	}
	for rows.Next() {
		var orderID, customer uuid.UUID
		var cents int64
		if err := rows.Scan(&orderID, &customer, &cents); err != nil {
			s.t.Fatal(err)
		}
		seen[orderID]++
		o, ok := want[orderID]
		if !ok {
			s.t.Errorf("notification for unknown order %s", orderID)
			continue
		}
		if customer != o.CustomerID.UUID || cents != o.Amount.Cents() {
			s.t.Errorf("notification for order %s: customer %s, %d cents; want %s, %d",
				orderID, customer, cents, o.CustomerID, o.Amount.Cents())
		}
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	for id := range want {
		if seen[id] != 1 {
			s.t.Errorf("order %s notified %d times, want 1", id, seen[id])
		}
	}
}

// checkOrdersUntouched checks that every placed order is still as the API returned it.
func (s *system) checkOrdersUntouched(placed []orders.Order) {
	s.t.Helper()
	store := orders.NewStore(s.pool)
	for _, o := range placed {
		got, err := store.Get(context.Background(), o.ID)
		if err != nil {
			s.t.Fatalf("order %s: %v", o.ID, err)
		}
		if got.CustomerID != o.CustomerID || got.Amount != o.Amount || got.Status != orders.StatusCreated {
			s.t.Errorf("order %s is now %+v, want %+v", o.ID, got, o)
		}
	}
}
