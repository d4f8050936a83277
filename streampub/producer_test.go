package streampub_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
)

func TestProducerNameNamesTheSystemTheSlotAndTheDatabase(t *testing.T) {
	if got, want := streampub.ProducerName(7301234567890123456, "orders-eu", "walbox"), "walbox-7301234567890123456-walbox-orders-eu"; got != want {
		t.Errorf("ProducerName: got %q, want %q", got, want)
	}
	if got, want := streampub.LegacyProducerName("walbox"), "walbox-walbox"; got != want {
		t.Errorf("LegacyProducerName: got %q, want %q", got, want)
	}
}

// Two database clusters with the default slot name publish into one stream, interleaved: each
// has a producer of its own, so the broker drops nothing of either. Under one name (walbox-walbox,
// before) it dropped each one's ids at or below the other's last.
func TestTwoSystemsWithOneSlotNameStoreEveryRow(t *testing.T) {
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	cfg.Slot = "walbox"
	a, err := dialBound(cfg, 7000000000000000011)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := dialBound(cfg, 7000000000000000022)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	apos, amsgs := rows(0x1000000, 30)
	bpos, bmsgs := rows(0x2000, 30) // a younger cluster: lower LSNs
	for i := 0; i < 30; i += 10 {
		publishAll(t, a, apos[i:i+10], amsgs[i:i+10])
		publishAll(t, b, bpos[i:i+10], bmsgs[i:i+10])
	}
	got := readStream(t, r.StreamURL(), cfg.Stream)
	if len(got) != 60 {
		t.Fatalf("%d messages in the stream, want 60", len(got))
	}
	for _, sys := range []string{"7000000000000000011", "7000000000000000022"} {
		var of []*amqp.Message
		for _, m := range got {
			if m.ApplicationProperties[streampub.PropSystem] == sys {
				of = append(of, m)
			}
		}
		want := wantPositions(apos)
		if sys == "7000000000000000022" {
			want = wantPositions(bpos)
		}
		if g := positions(of); !slices.Equal(g, want) {
			t.Errorf("system %s's positions in the stream:\n got %v\nwant %v", sys, g, want)
		}
	}
}

// legacyRow is a message as walbox stored it under the slot's old producer name: msg's id and
// body, or none and "{}" when msg is nil.
type legacyRow struct {
	id     int64
	system string
	pos    streampub.Position
	msg    *wire.Message
}

// publishLegacy stores rows under the name walbox gave the slot's producer before, as it did.
func publishLegacy(tb testing.TB, uri, streamName, slot string, rows []legacyRow) {
	tb.Helper()
	env, err := stream.NewEnvironment(streamconn.Options().SetUri(uri))
	if err != nil {
		tb.Fatal(err)
	}
	defer env.Close()
	if err := env.DeclareStream(streamName, nil); err != nil && !errors.Is(err, stream.StreamAlreadyExists) {
		tb.Fatal(err)
	}
	name := streampub.LegacyProducerName(slot)
	p, err := env.NewProducer(streamName, stream.NewProducerOptions().SetProducerName(name))
	if err != nil {
		tb.Fatal(err)
	}
	confirms := p.NotifyPublishConfirmation()
	var msgs []message.StreamMessage
	for _, r := range rows {
		m := amqp.NewMessage([]byte(`{}`))
		if r.msg != nil {
			m = amqp.NewMessage(r.msg.Payload)
			m.Properties = &amqp.MessageProperties{MessageID: r.msg.AMQPMessageID()}
		}
		m.SetPublishingId(r.id)
		m.ApplicationProperties = map[string]any{streampub.PropProducer: name, streampub.PropSystem: r.system,
			streampub.PropPosition: r.pos.String(), streampub.PropPublishingID: r.id}
		msgs = append(msgs, m)
	}
	if err := p.BatchSend(msgs); err != nil {
		tb.Fatal(err)
	}
	timeout := time.After(waitFor)
	for n := 0; n < len(rows); {
		select {
		case batch := <-confirms:
			for _, c := range batch {
				if !c.IsConfirmed() {
					tb.Fatalf("legacy message %d not confirmed", c.GetPublishingId())
				}
				n++
			}
		case <-timeout:
			tb.Fatalf("%d of %d legacy messages confirmed", n, len(rows))
		}
	}
	_ = p.Close()
}

// A stream that holds the slot's messages under the old name, of this system and another one
// with the same slot name: the new producer continues from this system's last message, skipping
// what it stored and numbering on from its id. Once it stored a message, it reads its own name.
func TestProducerContinuesFromItsSystemsLastMessageUnderTheOldName(t *testing.T) {
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	pos, msgs := rows(0x3000000, 12)
	other := strconv.FormatUint(7000000000000000099, 10)
	publishLegacy(t, r.StreamURL(), cfg.Stream, cfg.Slot, []legacyRow{
		{1, "7000000000000000001", pos[0], msgs[0]}, {2, "7000000000000000001", pos[1], msgs[1]},
		{3, other, streampub.Position{Timeline: 1, LSN: 0x9000000}, nil},
		{4, "7000000000000000001", pos[2], msgs[2]}, {5, other, streampub.Position{Timeline: 1, LSN: 0x9000100}, nil},
	})

	s := dial(t, cfg)
	if id, anchor, found := s.Anchor(); id != 4 || !found || anchor != pos[2] {
		t.Fatalf("anchor: id %d, position %v (found %v); want 4, %v", id, anchor, found, pos[2])
	}
	if _, continued := s.Producer(); continued != streampub.LegacyProducerName(cfg.Slot) {
		t.Errorf("continued from %q, want the old name", continued)
	}
	publishAll(t, s, pos[1:8], msgs[1:8]) // the slot replays from pos[1]
	_ = s.Close()

	again := dial(t, cfg)
	if id, anchor, found := again.Anchor(); id != 9 || !found || anchor != pos[7] {
		t.Fatalf("anchor of the next session: id %d, position %v (found %v); want 9, %v", id, anchor, found, pos[7])
	}
	if _, continued := again.Producer(); continued != "" {
		t.Errorf("the next session continued from %q, want its own name", continued)
	}
	publishAll(t, again, pos[6:], msgs[6:])
	var mine []*amqp.Message
	for _, m := range readStream(t, r.StreamURL(), cfg.Stream) {
		if m.ApplicationProperties[streampub.PropSystem] == "7000000000000000001" {
			mine = append(mine, m)
		}
	}
	if g, w := positions(mine), wantPositions(pos); !slices.Equal(g, w) {
		t.Fatalf("this system's positions in the stream:\n got %v\nwant %v", g, w)
	}
}

// A message under this relay's name that names another database system: another writer took the
// name. The session stops, naming both systems.
func TestMessageOfAnotherSystemUnderTheNameStopsTheSession(t *testing.T) {
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	forged := cfg
	forged.Producer = streampub.ProducerName(system, database, cfg.Slot)
	pos, msgs := rows(0x4000000, 3)
	w, err := dialBound(forged, 0)
	if err != nil {
		t.Fatal(err)
	}
	publishAll(t, w, pos, msgs) // no system: Producer set, no Bind
	_ = w.Close()

	_, err = dialBound(cfg, system)
	if !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("Bind: %v, want wire.ErrConflict", err)
	}
	t.Log(err)
	if msg := err.Error(); !strings.Contains(msg, "names database system none") || !strings.Contains(msg, "this server is system 7000000000000000001") {
		t.Errorf("the error does not name both systems: %v", err)
	}
}
