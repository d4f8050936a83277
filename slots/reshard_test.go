package slots_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/wire"
)

func TestReshardCreatesTheNewSetBesideTheOld(t *testing.T) {
	db, conn, slot := setup(t)
	if _, err := ensure(t, db, conn, slot); err != nil {
		t.Fatal(err)
	}
	var pubs, made []string
	cfg := slots.ReshardConfig{Conn: conn, DatabaseURL: db, Table: wire.DefaultTable,
		Base: shard.Set{Slot: slot, Publication: "walbox"}, Tables: []wire.Table{wire.DefaultTable}, Shards: 1,
		CreatedPublication: func(name string) { pubs = append(pubs, name) },
		EnsuredSlot: func(slot string, created bool) {
			if created {
				made = append(made, slot)
			}
		}}
	res, err := slots.Reshard(t.Context(), cfg)
	if err != nil || res.Move != nil {
		t.Fatalf("Reshard to the count there is = %+v, %v; want nothing to reshard", res, err)
	}

	cfg.Shards = 2
	res, err = slots.Reshard(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	to := shard.Set{Slot: slot, Publication: "walbox", N: 2}
	if want := []string{to.PublicationName(0), to.PublicationName(1)}; !slices.Equal(pubs, want) {
		t.Errorf("created publications %v, want %v", pubs, want)
	}
	if want := []string{to.SlotName(0), to.SlotName(1)}; !slices.Equal(made, want) {
		t.Errorf("created slots %v, want %v", made, want)
	}
	// Nothing streams from the old slot: it stays before the cut.
	if res.Move == nil || res.Move.To.Set.N != 2 || len(res.Behind) != 1 || !strings.HasPrefix(res.Behind[0], slot+" at ") {
		t.Fatalf("Reshard to 2 = %+v; want the move to 2 shards with %s behind the cut", res, slot)
	}
	m, err := slots.ReadReshard(t.Context(), cfg)
	if err != nil || m.Cut != res.Move.Cut {
		t.Fatalf("ReadReshard = %+v, %v; want the cut %s", m, err, res.Move.Cut)
	}
}
