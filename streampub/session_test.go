package streampub_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
)

// rows returns n messages: transactions of three rows, commit LSNs from first on.
func rows(first uint64, n int) ([]streampub.Position, []*wire.Message) {
	var pos []streampub.Position
	var msgs []*wire.Message
	for i := range n {
		p, m := row(first+uint64(i/3)*0x100, i%3)
		pos, msgs = append(pos, p), append(msgs, m)
	}
	return pos, msgs
}

func wantPositions(pos []streampub.Position) []string {
	out := make([]string, len(pos))
	for i, p := range pos {
		out[i] = p.String()
	}
	return out
}

func TestConfirmedMessagesAreStoredWithTheirProperties(t *testing.T) {
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	s := dial(t, cfg)
	pos, msgs := rows(0x16B374D848, 7)
	msgs[0].Headers = map[string]any{"traceparent": "00-abc-def-01", "attempt": float64(2), "tags": []any{"a"}}
	publishAll(t, s, pos, msgs)

	got := readStream(t, r.StreamURL(), cfg.Stream)
	if g, w := positions(got), wantPositions(pos); !slices.Equal(g, w) {
		t.Fatalf("positions in the stream:\n got %v\nwant %v", g, w)
	}
	m, want := got[0], msgs[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"message-id", m.Properties.MessageID, want.ID.String()},
		{"content type", m.Properties.ContentType, "application/json"},
		{"creation time", m.Properties.CreationTime.UTC(), want.CreatedAt},
		{"body", string(m.GetData()), string(want.Payload)},
		{"event_type", m.ApplicationProperties["event_type"], "order.created"},
		{"aggregate_type", m.ApplicationProperties["aggregate_type"], "order"},
		{"aggregate_id", m.ApplicationProperties["aggregate_id"], want.AggregateID},
		{"header traceparent", m.ApplicationProperties["traceparent"], "00-abc-def-01"},
		{"header attempt", m.ApplicationProperties["attempt"], float64(2)},
		{"header tags", m.ApplicationProperties["tags"], `["a"]`},
		{"producer", m.ApplicationProperties[streampub.PropProducer], streampub.ProducerName(system, database, cfg.Slot)},
		{"system", m.ApplicationProperties[streampub.PropSystem], "7000000000000000001"},
	}
	for _, c := range checks {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

// A new session after a crash replays from the slot: what the stream has is confirmed without
// being sent, the rest is numbered on from the producer's last id.
func TestReplayAfterRestartIsStoredOnce(t *testing.T) {
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	pos, msgs := rows(0x1000000, 30)

	first := dial(t, cfg)
	publishAll(t, first, pos[:20], msgs[:20])
	_ = first.Close()

	second := dial(t, cfg)
	id, anchor, found := second.Anchor()
	if id != 20 || !found || anchor != pos[19] {
		t.Fatalf("anchor: id %d, position %v (found %v); want 20, %v", id, anchor, found, pos[19])
	}
	publishAll(t, second, pos[5:], msgs[5:]) // the slot was behind: 15 rows sent again

	if g, w := positions(readStream(t, r.StreamURL(), cfg.Stream)), wantPositions(pos); !slices.Equal(g, w) {
		t.Fatalf("positions in the stream:\n got %v\nwant %v", g, w)
	}
}

// A relay stopped (SIGSTOP) with messages unsent, and a new one that took over from the same
// anchor, send the same rows with the same ids: the broker keeps each once, whichever comes first.
func TestTwoSessionsFromOneAnchorStoreEachRowOnce(t *testing.T) {
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	pos, msgs := rows(0x2000000, 40)
	publishAll(t, dial(t, cfg), pos[:10], msgs[:10])

	old, taker := dial(t, cfg), dial(t, cfg)
	publishAll(t, taker, pos[:30], msgs[:30])
	publishAll(t, old, pos[:25], msgs[:25]) // the stopped one resumes, behind
	publishAll(t, taker, pos[30:], msgs[30:])
	publishAll(t, old, pos[25:], msgs[25:])

	if g, w := positions(readStream(t, r.StreamURL(), cfg.Stream)), wantPositions(pos); !slices.Equal(g, w) {
		t.Fatalf("positions in the stream:\n got %v\nwant %v", g, w)
	}
}

// Another producer's messages after this one's last (another shard's) do not hide the anchor.
// The session's connections leave the receive buffer to the kernel. With the client's default
// socket buffers, reading back through 3,000 messages took over ten seconds. The check reads the
// buffer's size, not a clock, so a slow machine cannot fail it.
func TestAnchorFoundBehindAnotherProducersMessages(t *testing.T) {
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	other := cfg
	other.Slot = testenv.UniqueName("shard")
	other.Window = 4000 // all 3000 in flight at once
	pos, msgs := rows(0x3000000, 12)
	publishAll(t, dial(t, cfg), pos[:6], msgs[:6])
	opos, omsgs := rows(0x3000000, 3000)
	publishAll(t, dial(t, other), opos, omsgs)

	before := testenv.ReceiveBuffers(t, r.StreamURL())
	s := dial(t, cfg)
	if id, anchor, found := s.Anchor(); id != 6 || !found || anchor != pos[5] {
		t.Fatalf("anchor: id %d, position %v (found %v); want 6, %v", id, anchor, found, pos[5])
	}
	testenv.CheckNewReceiveBuffers(t, r.StreamURL(), before)
}

func TestTooLargeMessageIsUnpublishable(t *testing.T) {
	r := testenv.SharedRabbitStream(t)
	s := dial(t, config(r))
	pos, m := row(0x4000000, 0)
	m.Payload = []byte(`"` + strings.Repeat("x", 2<<20) + `"`)
	s.At(pos.Timeline, pos.LSN, pos.Index)
	if _, err := s.Publish(context.Background(), m); !errors.Is(err, wire.ErrUnpublishable) {
		t.Fatalf("Publish of 2 MiB: %v, want ErrUnpublishable", err)
	}
	seq, err := s.Park(context.Background(), &wire.Parked{Message: wire.Message{ID: m.ID, EventType: "x", Payload: []byte(`{}`)}, Reason: "too large"})
	if err != nil || seq != 1 {
		t.Fatalf("Park: seq %d, %v", seq, err)
	}
	waitConfirms(t, s, 1)
}

// A row too large for a frame, before the anchor, was parked by the session that met it, unless
// that session died first while a later row was stored. Its replay must be parked again, not
// confirmed as stored: the main stream never had it.
func TestTooLargeRowBeforeTheAnchorIsUnpublishable(t *testing.T) {
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	pos, msgs := rows(0x5000000, 6)
	publishAll(t, dial(t, cfg), pos[3:], msgs[3:]) // the row at pos[1] was sent to be parked; then a crash

	s := dial(t, cfg)
	if _, anchor, found := s.Anchor(); !found || anchor != pos[5] {
		t.Fatalf("anchor: position %v (found %v); want %v", anchor, found, pos[5])
	}
	msgs[1].Payload = []byte(`"` + strings.Repeat("x", 2<<20) + `"`)
	s.At(pos[1].Timeline, pos[1].LSN, pos[1].Index)
	if _, err := s.Publish(context.Background(), msgs[1]); !errors.Is(err, wire.ErrUnpublishable) {
		t.Fatalf("Publish of 2 MiB before the anchor: %v, want ErrUnpublishable (to be parked)", err)
	}
}

// Retention removed the stream's first messages. A replay skips a row from before the stream's
// first message: it is not checked. The next row it skips lies past that first message, at a
// position the stream has no message at. It was never stored: the session stops on it. (Before,
// the floor of what the read back found was its last message, not its first: such a row was taken
// for one retention removed.)
func TestSkippedRowPastATrimmedStreamsFirstMessageIsChecked(t *testing.T) {
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	declareTrimmed(t, r.StreamURL(), cfg.Stream)
	pos, msgs := rows(0x5000000, 600)
	for _, m := range msgs {
		m.Payload = []byte(`{"pad":"` + strings.Repeat("x", 300) + `"}`)
	}
	first := dial(t, cfg)
	for i := 0; i < len(pos); i += 20 { // a chunk each: retention removes whole segments
		publishAll(t, first, pos[i:i+20], msgs[i:i+20])
	}
	_ = first.Close()

	var kept []string
	for range 30 {
		kept = positions(readStream(t, r.StreamURL(), cfg.Stream))
		if len(kept) > 0 && len(kept) < len(pos)-10 && kept[0] != pos[0].String() {
			break
		}
		time.Sleep(time.Second)
	}
	if len(kept) == 0 || kept[0] == pos[0].String() || len(kept) >= len(pos)-10 {
		t.Fatalf("retention removed none of the stream's first messages: %d kept", len(kept))
	}
	k := len(pos) - len(kept) // the first message the stream holds
	if kept[0] != pos[k].String() {
		t.Fatalf("first message kept at %s, want %s", kept[0], pos[k])
	}

	replay := func(at streampub.Position, m *wire.Message) error {
		s := dial(t, cfg)
		defer func() { _ = s.Close() }()
		s.At(pos[0].Timeline, pos[0].LSN, pos[0].Index)
		if _, err := s.Publish(context.Background(), msgs[0]); err != nil {
			t.Fatalf("the row retention removed: %v", err)
		}
		s.At(at.Timeline, at.LSN, at.Index)
		_, err := s.Publish(context.Background(), m)
		return err
	}
	// A row the stream holds, past its first message: skipped.
	if err := replay(pos[k+1], msgs[k+1]); err != nil {
		t.Fatalf("a stored row: %v", err)
	}
	// A row of a restored server, at a position of the stream's span where it holds none.
	other := streampub.Position{Timeline: 1, LSN: pos[k+1].LSN, Index: 7}
	_, m := row(other.LSN, other.Index)
	if err := replay(other, m); !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("a row the stream never stored, past its first message: err %v, want wire.ErrConflict", err)
	}
}

// A replay skips a row whose message is not the stream's at its position: the session stops, and
// names both causes. A restored server wrote it, or walbox's settings changed since the stream
// stored the row: the old settings are the way out then.
func TestSkippedRowWithAnotherMessageNamesTheSettings(t *testing.T) {
	r := testenv.SharedRabbitStream(t)
	cfg := config(r)
	pos, msgs := rows(0x6000000, 6)
	first := dial(t, cfg)
	publishAll(t, first, pos, msgs)
	_ = first.Close()

	s := dial(t, cfg)
	m := *msgs[2]
	m.Payload = []byte(`{"n":2}`)
	s.At(pos[2].Timeline, pos[2].LSN, pos[2].Index)
	_, err := s.Publish(context.Background(), &m)
	if !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("a row with another body: err %v, want wire.ErrConflict", err)
	}
	for _, want := range []string{"restored", "--message-prefix", "until the slot is past the stream's last row"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
}
