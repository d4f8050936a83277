package republish_test

import (
	"context"
	"testing"
	"time"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/internal/republish"
	"github.com/walbox/walbox/wire"
)

// scheduling is a session with a schedule that counts what it was handed.
type scheduling struct {
	confirms             chan wire.Confirm
	seq                  uint64
	published, scheduled int
}

func (s *scheduling) next() uint64 {
	s.seq++
	s.confirms <- wire.Confirm{Seq: s.seq}
	return s.seq
}
func (s *scheduling) Publish(context.Context, *wire.Message) (uint64, error) {
	s.published++
	return s.next(), nil
}
func (s *scheduling) Park(context.Context, *wire.Parked) (uint64, error) { return s.next(), nil }
func (s *scheduling) Schedule(context.Context, *wire.Message) (uint64, error) {
	s.scheduled++
	return s.next(), nil
}
func (s *scheduling) Confirms() <-chan wire.Confirm { return s.confirms }
func (s *scheduling) Close() error                  { return nil }

// walbox recover republishes a row scheduled at its commit and due by now through the schedule,
// as walbox run would. There a cancel's tombstone stops it, and a record this slot sent already
// stops it too. Published at once, a cancelled message would leave.
func TestARowDueAlreadyGoesThroughTheSchedule(t *testing.T) {
	cols := []decoder.Column{{Name: "id", Type: 2950}, {Name: "aggregate_type", Type: 25}, {Name: "aggregate_id", Type: 25},
		{Name: "event_type", Type: 25}, {Name: "payload", Type: 3802}, {Name: "headers", Type: 3802},
		{Name: "created_at", Type: 1184}, {Name: "deliver_at", Type: 1184}}
	m := wire.Mapping{Table: wire.DefaultTable}
	rows, err := decoder.New(m).Rows(m.Table.Schema, m.Table.Name, cols)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	row := func(deliverAt []byte) [][]byte {
		return [][]byte{[]byte("0190a0b0-0000-7000-8000-000000000001"), []byte("order"), []byte("1"), []byte("order.reminder"),
			[]byte("{}"), []byte("{}"), []byte("2026-11-28 10:00:00+00"), deliverAt}
	}
	for _, tt := range []struct {
		name      string
		deliverAt []byte
		scheduled bool
	}{
		{"due later", []byte("2026-11-28 13:00:00+00"), true},
		{"due already", []byte("2026-11-28 11:00:00+00"), true},
		{"no deliver_at", nil, false},
	} {
		s := &scheduling{confirms: make(chan wire.Confirm, 4)}
		p := republish.New(s, nil, nil)
		p.ScheduleAfter(now)
		if err := p.Row(context.Background(), rows, m.Table, row(tt.deliverAt), time.Time{}); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := s.scheduled == 1; got != tt.scheduled || s.scheduled+s.published != 1 {
			t.Errorf("%s: scheduled %d, published %d; want it scheduled: %v", tt.name, s.scheduled, s.published, tt.scheduled)
		}
	}
}
