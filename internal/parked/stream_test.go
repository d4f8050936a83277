package parked_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/walbox/walbox/internal/parked"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
)

// A command keeps at most StreamConfig.Limit entries of the park stream in memory, and counts the
// rest. Entries of another database are counted apart, and never among this database's.
func TestAStreamCommandKeepsAtMostItsLimit(t *testing.T) {
	rabbit := testenv.StartRabbitStream(t)
	pg := testenv.SharedPostgres(t)
	db := pg.Conn(t, pg.NewDatabase(t))
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, db, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	cfg := parked.StreamConfig{Stream: streampub.Config{URIs: []string{rabbit.StreamURL()}, Stream: testenv.UniqueName("events")},
		DB: db, Schema: "public", Database: "1/a", Limit: 3}
	decl := cfg.Stream
	decl.Producer = "test"
	s, err := streampub.Dial(ctx, decl) // declares the stream and its park stream
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	r, err := streampub.DialReplayer(cfg.Stream, cfg.Database)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 6 {
		m := message("order.x", nil)
		p := &wire.Parked{Message: m, Reason: "r", Table: "public.outbox", LSN: "0/" + strconv.Itoa(i+1), Database: "1/a"}
		if i == 1 {
			p.Database = "2/a"
		} else if len(want) < 3 {
			want = append(want, m.ID.String())
		}
		if err := r.Park(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	l, err := parked.ListStream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range l.Entries {
		got = append(got, e.ID)
	}
	if !slices.Equal(got, want) || l.More != 2 || len(l.Others) != 1 {
		t.Fatalf("list with limit 3 = %v, %d more, others %v; want %v, 2 more and 1 other", got, l.More, l.Others, want)
	}
}
