package schedule_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/schedule"
	"github.com/walbox/walbox/wire"
)

// held is a session that holds every confirm until released.
type held struct {
	confirms  chan wire.Confirm
	published chan struct{} // closed at the first publish
	release   chan struct{}
	once      sync.Once
	seq       uint64
}

func (p *held) Publish(_ context.Context, _ *wire.Message) (uint64, error) {
	p.seq++
	seq := p.seq
	p.once.Do(func() { close(p.published) })
	go func() {
		<-p.release
		p.confirms <- wire.Confirm{Seq: seq}
	}()
	return seq, nil
}
func (p *held) Park(ctx context.Context, pk *wire.Parked) (uint64, error) {
	return p.Publish(ctx, &pk.Message)
}
func (p *held) Confirms() <-chan wire.Confirm { return p.confirms }
func (p *held) Close() error                  { return nil }

// A cancel of a message the sender is publishing waits for the sender's commit, then says false:
// the message left. It neither says true for a message that left, nor deadlocks with the sender.
func TestCancelDuringSendWaitsAndSaysSent(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	ctx := context.Background()
	id := uuid.New()
	pg.Exec(t, db, `INSERT INTO walbox_schedule (slot_name, message_id, deliver_at, id, aggregate_type, aggregate_id,
		event_type, payload, headers, amqp_id, routing_key, exchange)
		VALUES ('s', $1::text, pg_catalog.now(), $1::uuid, 'order', '1', 'order.reminder', '{}', '{}', '', '', '')`, id.String())
	pub := &held{confirms: make(chan wire.Confirm, 8), published: make(chan struct{}), release: make(chan struct{})}
	s := schedule.NewSender(schedule.SenderConfig{DatabaseURL: db, Schema: "public", Slot: "s",
		Dial: func(context.Context) (wire.Publisher, error) { return pub, nil }, Active: func() bool { return true }})
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go s.Run(sctx) //nolint:errcheck // it returns nil when sctx ends
	select {
	case <-pub.published:
	case <-time.After(time.Minute):
		t.Fatal("the sender did not publish the due message")
	}
	answer := make(chan error, 1)
	var waiting bool
	go func() {
		answer <- conn.QueryRow(ctx, "SELECT walbox_cancel($1::text)", id.String()).Scan(&waiting)
	}()
	select {
	case err := <-answer:
		t.Fatalf("the cancel answered %v (%v) while the message was being sent, before its confirm", waiting, err)
	case <-time.After(2 * time.Second):
	}
	close(pub.release)
	select {
	case err := <-answer:
		if err != nil || waiting {
			t.Fatalf("cancel after the send: %v, %v; want false", waiting, err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the cancel did not return after the sender's commit")
	}
}
