package streampub_test

import (
	"testing"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/internal/testenv"
)

// storeOffset stores offset for consumer name in the stream itself, as an application reading
// it with the broker's offset tracking does: an entry that is no message, with an offset of its
// own.
func storeOffset(t *testing.T, r *testenv.Rabbit, streamName, name string, offset int64) {
	t.Helper()
	env, err := stream.NewEnvironment(streamconn.Options().SetUri(r.StreamURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if err := env.StoreOffset(name, streamName, offset); err != nil {
		t.Fatal(err)
	}
}

// The read back to the anchor starts on an offset that holds no message (an offset another
// application stored in the stream): the broker sends the next message first. That is no sign
// that retention removed the offsets before, and the anchor behind is found. (Before, the
// search ended there without an anchor: the replay was stored again.)
func TestAnchorFoundBehindAnEntryThatIsNoMessage(t *testing.T) {
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	other := cfg
	other.Slot = testenv.UniqueName("shard")
	other.Window = 2000
	pos, msgs := rows(0x3000000, 6)
	publishAll(t, dial(t, cfg), pos, msgs)
	storeOffset(t, r, cfg.Stream, "reader", 5) // offset 6
	// The other producer's 1,023 messages, then its last chunk of 50: the read back from that
	// chunk's start (offset 1030) steps 1,024 offsets back, to 6.
	o := dial(t, other)
	opos, omsgs := rows(0x3000000, 1073)
	publishAll(t, o, opos[:1023], omsgs[:1023])
	publishAll(t, o, opos[1023:], omsgs[1023:])

	s := dial(t, cfg)
	if id, anchor, found := s.Anchor(); id != 6 || !found || anchor != pos[5] {
		t.Fatalf("anchor: id %d, position %v (found %v); want 6, %v", id, anchor, found, pos[5])
	}
}

// Held's read back starts on an offset that holds no message: it reads on behind it and finds
// the rows stored before. (Before, it took the entry for the stream's start and recover stored
// those rows again.)
func TestHeldReadsBehindAnEntryThatIsNoMessage(t *testing.T) {
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	other := cfg
	other.Slot = testenv.UniqueName("shard")
	other.Window = 2000
	pos, msgs := rows(0x3000000, 6)
	publishAll(t, dial(t, cfg), pos, msgs)
	storeOffset(t, r, cfg.Stream, "reader", 5) // offset 6
	// The stream ends at offset 1030: the first span read back, 1,024 offsets, starts at 6.
	opos, omsgs := rows(0x3000000, 1023)
	publishAll(t, dial(t, other), opos, omsgs)

	ask := map[string]bool{}
	for _, m := range msgs {
		ask[m.AMQPMessageID()] = true
	}
	held, err := dial(t, cfg).Held(1, 0x2000000, ask)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != len(msgs) {
		t.Errorf("Held found %d of the %d rows the stream holds", len(held), len(msgs))
	}
}
