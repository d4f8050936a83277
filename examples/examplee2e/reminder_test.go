package examplee2e_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/walbox/walbox/examples/orders"
	"github.com/walbox/walbox/internal/testenv"
)

// An order schedules its payment reminder when it is created. Paying it cancels the reminder in
// the payment's transaction: the paid order is never reminded. The unpaid one is, once due.
func TestPaymentCancelsTheReminder(t *testing.T) {
	const after = 4 * time.Second
	s := newSystemWith(t, testenv.SharedRabbit(t), orders.PaymentReminder(after))
	s.startRelay()
	s.startNotifier()

	paid := s.placeOrder("7d7d7d7d-0000-4000-8000-000000000001", 1000)
	unpaid := s.placeOrder("7d7d7d7d-0000-4000-8000-000000000002", 2000)
	resp, err := http.Post(s.api.URL+"/orders/"+paid.ID.String()+"/pay", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Order             orders.Order `json:"order"`
		ReminderCancelled bool         `json:"reminder_cancelled"`
	}
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !got.ReminderCancelled || got.Order.Status != orders.StatusPaid {
		t.Fatalf("POST /orders/%s/pay: %d %+v %v; want 200, paid, reminder cancelled", paid.ID, resp.StatusCode, got, err)
	}

	s.waitNotified(3, deliveryTimeout) // two order.created, one reminder
	time.Sleep(time.Second)            // a reminder of the paid order would land by now too
	if n := s.count("SELECT count(*) FROM notifications WHERE order_id = $1", paid.ID.UUID); n != 1 {
		t.Errorf("paid order notified %d times, want once (created, no reminder)", n)
	}
	if n := s.count("SELECT count(*) FROM notifications WHERE order_id = $1", unpaid.ID.UUID); n != 2 {
		t.Errorf("unpaid order notified %d times, want twice (created, reminder)", n)
	}
	if n := s.count("SELECT count(*) FROM notifications n JOIN orders o ON o.id = n.order_id "+
		"WHERE n.order_id = $1 AND n.sent_at >= o.created_at + $2::interval", unpaid.ID.UUID, after.String()); n != 1 {
		t.Errorf("%d notifications of the unpaid order at or after its reminder was due, want 1", n)
	}
}
