package streampub_test

import (
	"context"
	"testing"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
)

// Held finds the rows the stream holds by message id, reading back past the span of the last
// chunk, and only in this producer's messages: another database's message with the same id
// (one stream, two databases, mapped tables with ids of their own) is not taken for the row.
func TestHeldFindsThisProducersMessagesByID(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs RabbitMQ")
	}
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	a := dial(t, cfg)
	const n = 2000
	ids := make([]string, n)
	pos := make([]streampub.Position, n)
	msgs := make([]*wire.Message, n)
	for i := range n {
		pos[i], msgs[i] = row(uint64(1000+i), 0)
		ids[i] = msgs[i].AMQPMessageID()
	}
	publishAll(t, a, pos, msgs)

	// Another database on the same slot name and stream writes a message whose id this
	// database's gap will ask about.
	ctx := context.Background()
	b, err := streampub.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Bind(ctx, system, "other"); err != nil {
		t.Fatal(err)
	}
	p, m := row(5000, 0)
	m.MessageID = "shared-1"
	publishAll(t, b, []streampub.Position{p}, []*wire.Message{m})

	again := dial(t, cfg)
	ask := map[string]bool{ids[100]: true, ids[1600]: true, "shared-1": true, "missing": true}
	held, err := again.Held(1, 1500, ask)
	if err != nil {
		t.Fatal(err)
	}
	if !held[ids[100]] || !held[ids[1600]] || held["shared-1"] || held["missing"] || len(held) != 2 {
		t.Errorf("Held: %v; want the rows at offsets 100 and 1600 only", held)
	}
}

// A message under the name walbox gave the producer before (walbox-<slot>) that names no
// database system is not taken for this relay's: another cluster with the same slot name wrote
// under that name too, and its rows may have this database's ids. The relay's continuation from
// that name reads only its own system's messages; Held does the same, so recover publishes the
// row (a duplicate at worst) instead of skipping it (lost).
func TestHeldTakesNoOldNameMessageWithoutASystem(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs RabbitMQ")
	}
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	old := cfg
	old.Producer = streampub.LegacyProducerName(cfg.Slot) // bound to no system: no walbox-system
	p, m := row(1000, 0)
	m.MessageID = "shared-1"
	publishAll(t, dial(t, old), []streampub.Position{p}, []*wire.Message{m})

	s := dial(t, cfg)
	held, err := s.Held(1, 500, map[string]bool{"shared-1": true})
	if err != nil {
		t.Fatal(err)
	}
	if held["shared-1"] {
		t.Error("Held took a message of the old name without a database system for this relay's")
	}
}
