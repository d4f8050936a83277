package decoder_test

import (
	"testing"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/wire"
)

// A relay relays the canaries of its own slot, to the canary's routing key. Every slot of a
// database gets every message: another slot's canary is a change of the transaction, not a row.
// A relay without a canary relays none.
func TestCanaryOfItsOwnSlotOnly(t *testing.T) {
	canary := func(slot string) string {
		return `{"v": 1, "id": "0b0e6a3c-6a4f-4f55-9d7e-1d5b8b6e4a01", "aggregate_type": "walbox.canary", ` +
			`"aggregate_id": "` + slot + `", "event_type": "walbox.canary", "payload": {"slot": "` + slot + `"}}`
	}
	tests := []struct {
		name   string
		own    string
		frame  []byte
		want   decoder.Kind
		relays bool
	}{
		{"its own", "s1", logicalMsg(true, testLSN, wire.CanaryPrefix, canary("s1")), decoder.KindRow, true},
		{"another slot's", "s1", logicalMsg(true, testLSN, wire.CanaryPrefix, canary("s2")), decoder.KindOtherMessage, false},
		{"canary off", "", logicalMsg(true, testLSN, wire.CanaryPrefix, canary("s1")), decoder.KindOtherMessage, false},
		{"not transactional", "s1", logicalMsg(false, testLSN, wire.CanaryPrefix, canary("s1")), decoder.KindSkip, false},
		{"not walbox's content", "s1", logicalMsg(true, testLSN, wire.CanaryPrefix, "hello"), decoder.KindOtherMessage, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := decoder.New().WithMessagePrefix("walbox").WithCanary(tt.own).Decode(testLSN, tt.frame)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind != tt.want {
				t.Fatalf("kind %v, want %v", ev.Kind, tt.want)
			}
			if tt.relays && (ev.Message.Key() != wire.CanaryEventType || !wire.IsCanary(ev.Message.EventType, ev.Message.Headers)) {
				t.Errorf("routing key %q, event type %q, headers %v; want %s and the header %s", ev.Message.Key(),
					ev.Message.EventType, ev.Message.Headers, wire.CanaryEventType, wire.HeaderCanary)
			}
		})
	}
}
