package schedule_test

import (
	"context"
	"testing"

	"github.com/walbox/walbox/schedule"
	"github.com/walbox/walbox/wire"
)

// instant is a session that confirms each message as it is published, under the caller's number.
type instant struct{ confirms chan wire.Confirm }

func (p *instant) Publish(ctx context.Context, m *wire.Message) (uint64, error) {
	return p.PublishAs(ctx, 0, m)
}
func (p *instant) Park(ctx context.Context, _ *wire.Parked) (uint64, error) {
	return p.PublishAs(ctx, 0, nil)
}
func (p *instant) PublishAs(_ context.Context, seq uint64, _ *wire.Message) (uint64, error) {
	p.confirms <- wire.Confirm{Seq: seq}
	return seq, nil
}
func (p *instant) ParkAs(ctx context.Context, seq uint64, _ *wire.Parked) (uint64, error) {
	return p.PublishAs(ctx, seq, nil)
}
func (p *instant) Confirms() <-chan wire.Confirm { return p.confirms }
func (p *instant) Close() error                  { close(p.confirms); return nil }

// The cost a Recorder adds to a message that is not scheduled: its publish and its confirm's hop
// through the Recorder's forwarding goroutine, with a window in flight. Compare BenchmarkSessionAlone.
func BenchmarkRecorderPublish(b *testing.B) {
	inner := &instant{confirms: make(chan wire.Confirm, 1024)}
	r := schedule.NewRecorder(inner, nil, "public", "slot", 1024, nil)
	defer r.Close()
	benchPublish(b, r)
}

// BenchmarkSessionAlone is BenchmarkRecorderPublish without the Recorder.
func BenchmarkSessionAlone(b *testing.B) {
	benchPublish(b, &instant{confirms: make(chan wire.Confirm, 1024)})
}

func benchPublish(b *testing.B, p wire.Publisher) {
	m := &wire.Message{EventType: "e", Payload: []byte(`{}`)}
	ctx := context.Background()
	confirms := p.Confirms()
	b.ReportAllocs()
	inFlight := 0
	for b.Loop() {
		if _, err := p.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
		// A window of 512 in flight, as the relay keeps one, drained as the confirms come.
		if inFlight++; inFlight == 512 {
			for ; inFlight > 0; inFlight-- {
				<-confirms
			}
		}
	}
	for ; inFlight > 0; inFlight-- {
		<-confirms
	}
}
