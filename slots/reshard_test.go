package slots_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/registry"
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

// Retire compares each old slot with its record: a slot advanced past the cut behind walbox's
// back is refused, and it and its record stay, the evidence of the gap. Once the record passed the
// cut (the relay confirmed it), the old set goes, records and publications too. The old code
// judged the slot alone, dropped it and forgot its record.
func TestRetireHoldsEachOldSlotAgainstItsRecord(t *testing.T) {
	r := reshardToTwo(t)
	ctx, conn, slot, cfg := t.Context(), r.conn, r.slot, r.cfg
	// Anyone with REPLICATION may move an inactive slot past the cut.
	if _, err := conn.Exec(ctx, "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", slot); err != nil {
		t.Fatal(err)
	}
	reg := registry.New(conn, "public")
	retire := func() error {
		t.Helper()
		m, err := slots.ReadReshard(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return slots.Retire(ctx, cfg, m, func(inspect.Slot) {})
	}
	err := retire()
	if err == nil || !strings.Contains(err.Error(), "ahead of") {
		t.Fatalf("Retire of a slot advanced behind walbox's back = %v; want a refusal saying it is ahead of its record", err)
	}
	if info, _ := inspect.ReadSlot(ctx, conn, slot); !info.Exists {
		t.Fatal("the refused slot was dropped")
	}
	if _, ok, err := reg.Get(ctx, slot); err != nil || !ok {
		t.Fatalf("the refused slot's record is gone (%v)", err)
	}

	// The relay confirms past the cut: the record passes it, and the old set may go.
	info, err := inspect.ReadSlot(ctx, conn, slot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Confirm(ctx, slot, 1, info.ConfirmedFlush, 0); err != nil {
		t.Fatal(err)
	}
	if err := retire(); err != nil {
		t.Fatalf("Retire once the record passed the cut: %v", err)
	}
	if info, _ := inspect.ReadSlot(ctx, conn, slot); info.Exists {
		t.Error("the retired slot still exists")
	}
	if _, ok, _ := reg.Get(ctx, slot); ok {
		t.Error("the retired slot's record is still there")
	}
}

// A configuration that relays another table beside the outbox table, through the same
// publication, is not resharded: the shards would split the outbox table alone, and retiring the
// old set would drop the publication that carries the other table. Nothing is created. A set
// made anyway (the other table added after the reshard began) is not retired: its publication
// stays. The old code created the new set and its retire dropped the publication.
func TestReshardKeepsThePublicationOfOtherTables(t *testing.T) {
	db, conn, slot := setup(t)
	ctx := t.Context()
	if _, err := ensure(t, db, conn, slot); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE public.legacy (LIKE public.outbox INCLUDING ALL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ALTER PUBLICATION walbox ADD TABLE public.legacy"); err != nil {
		t.Fatal(err)
	}
	legacy := wire.Table{Schema: "public", Name: "legacy"}
	cfg := slots.ReshardConfig{Conn: conn, DatabaseURL: db, Table: wire.DefaultTable,
		Base: shard.Set{Slot: slot, Publication: "walbox"}, Tables: []wire.Table{wire.DefaultTable, legacy}, Shards: 2}
	to := shard.Set{Slot: slot, Publication: "walbox", N: 2}
	t.Cleanup(func() {
		for k := range 2 {
			_ = slots.Drop(context.Background(), conn, to.SlotName(k))
		}
	})
	publications := func() (names []string) {
		t.Helper()
		rows, err := conn.Query(ctx, "SELECT pubname::text FROM pg_publication ORDER BY 1")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		return names
	}
	for _, tables := range [][]wire.Table{{wire.DefaultTable, legacy}, {wire.DefaultTable}} {
		cfg.Tables = tables
		if _, err := slots.Reshard(ctx, cfg); err == nil || !strings.Contains(err.Error(), "legacy") {
			t.Fatalf("Reshard of tables %v with public.legacy in the publication = %v; want a refusal naming it", tables, err)
		}
	}
	if got := publications(); !slices.Equal(got, []string{"walbox"}) {
		t.Fatalf("publications after the refusals: %v; want walbox alone", got)
	}

	// The new set made before the other table joined the publication.
	if _, err := conn.Exec(ctx, "ALTER PUBLICATION walbox DROP TABLE public.legacy"); err != nil {
		t.Fatal(err)
	}
	if _, err := slots.Reshard(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ALTER PUBLICATION walbox ADD TABLE public.legacy"); err != nil {
		t.Fatal(err)
	}
	info, err := inspect.ReadSlot(ctx, conn, slot)
	if err != nil {
		t.Fatal(err)
	}
	// The old relay passed the cut; only the other table holds the set back.
	if _, err := conn.Exec(ctx, "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", slot); err != nil {
		t.Fatal(err)
	}
	if info, err = inspect.ReadSlot(ctx, conn, slot); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.New(conn, "public").Confirm(ctx, slot, 1, info.ConfirmedFlush, 0); err != nil {
		t.Fatal(err)
	}
	m, err := slots.ReadReshard(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := slots.Retire(ctx, cfg, m, func(inspect.Slot) {}); err == nil || !strings.Contains(err.Error(), "legacy") {
		t.Fatalf("Retire with public.legacy in the old publication = %v; want a refusal naming it", err)
	}
	if got := publications(); !slices.Contains(got, "walbox") {
		t.Fatalf("publications after the refused retire: %v; want walbox kept", got)
	}
}

// A reshard killed after it created the new set's last slot, before it recorded it, leaves the slot
// unrecorded. A relay of the new set started before the rerun adopts it (Prepare) and streams. The
// rerun must still finish: the adopted record's position is no earlier than the slot's consistent
// point, so the cut taken from it keeps the old set delivering every row the new slot skipped. The
// old code recorded no consistent point on adoption, and the rerun failed for good.
func TestReshardRerunAfterARelayAdoptedTheUnrecordedSlot(t *testing.T) {
	r := reshardToTwo(t)
	ctx, db, conn, cfg := t.Context(), r.db, r.conn, r.cfg
	last := r.to.SlotName(1)
	reg := registry.New(conn, "public")
	if err := reg.Forget(ctx, last); err != nil { // as if killed at slot.created
		t.Fatal(err)
	}
	// Rows committed after the slot's consistent point; something moves it past them.
	if _, err := conn.Exec(ctx, "INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload) "+
		"SELECT 'a', g::text, 'e', '{}' FROM generate_series(1, 20) g"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", last); err != nil {
		t.Fatal(err)
	}
	info, err := inspect.ReadSlot(ctx, conn, last)
	if err != nil {
		t.Fatal(err)
	}

	// A relay of the new set, started before the rerun, adopts the slot.
	repl := replConn(t, db)
	sys, err := pglogrepl.IdentifySystem(ctx, repl)
	if err != nil {
		t.Fatal(err)
	}
	p, err := slots.Prepare(ctx, slots.PrepareConfig{Slot: last, Conn: repl, Primary: conn, SlotDB: conn, Registry: reg,
		System: sys, Xmin: func(pglogrepl.LSN) uint64 { return 0 }})
	if err != nil || !p.Adopted {
		t.Fatalf("Prepare of the unrecorded slot = %+v, %v; want it adopted", p, err)
	}

	res, err := slots.Reshard(ctx, cfg)
	if err != nil || res.Move == nil {
		t.Fatalf("the rerun of the reshard = %+v, %v; want the move to 2 shards", res, err)
	}
	if res.Move.To.Set.N != 2 || res.Move.Cut < info.ConfirmedFlush {
		t.Errorf("the rerun's move = %+v; want to 2 shards with the cut no earlier than %s, where the slot was adopted",
			res.Move, info.ConfirmedFlush)
	}
}

// resharded is a single slot resharded to two shards: the old slot and the new set side by side.
type resharded struct {
	db   string
	conn *pgx.Conn
	slot string
	cfg  slots.ReshardConfig
	to   shard.Set
}

// reshardToTwo creates a single slot and reshards it to two shards. The new slots go when the
// test ends.
func reshardToTwo(t *testing.T) resharded {
	t.Helper()
	db, conn, slot := setup(t)
	if _, err := ensure(t, db, conn, slot); err != nil {
		t.Fatal(err)
	}
	r := resharded{db: db, conn: conn, slot: slot, to: shard.Set{Slot: slot, Publication: "walbox", N: 2},
		cfg: slots.ReshardConfig{Conn: conn, DatabaseURL: db, Table: wire.DefaultTable,
			Base: shard.Set{Slot: slot, Publication: "walbox"}, Tables: []wire.Table{wire.DefaultTable}, Shards: 2}}
	t.Cleanup(func() {
		for k := range 2 {
			_ = slots.Drop(context.Background(), conn, r.to.SlotName(k))
		}
	})
	if res, err := slots.Reshard(t.Context(), r.cfg); err != nil || res.Move == nil {
		t.Fatalf("Reshard to 2 = %+v, %v", res, err)
	}
	return r
}

// Any role with REPLICATION may create a slot of any name. One named as a slot of the new set, in
// another database or with another plugin, is not walbox's: the reshard refuses to record it as
// the new set's slot. The old code recorded it and reported the move, and its relay could never
// stream from it.
func TestReshardRefusesAForeignSlotOfTheNewSetsName(t *testing.T) {
	for foreign, want := range map[string]error{"another database": inspect.ErrSlotMismatch,
		"another plugin": inspect.ErrSlotMismatch, "streaming": slots.ErrSlotActive} {
		t.Run(foreign, func(t *testing.T) {
			db, conn, slot := setup(t)
			ctx := t.Context()
			if _, err := ensure(t, db, conn, slot); err != nil {
				t.Fatal(err)
			}
			cfg := slots.ReshardConfig{Conn: conn, DatabaseURL: db, Table: wire.DefaultTable,
				Base: shard.Set{Slot: slot, Publication: "walbox"}, Tables: []wire.Table{wire.DefaultTable}, Shards: 2}
			to := shard.Set{Slot: slot, Publication: "walbox", N: 2}
			at, plugin := conn, "pgoutput"
			switch foreign {
			case "another database":
				at = testenv.SharedPostgres(t).Conn(t, testenv.SharedPostgres(t).NewDatabase(t))
			case "another plugin":
				plugin = "test_decoding"
			}
			if _, err := at.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, $2)", to.SlotName(1), plugin); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = slots.Drop(context.Background(), conn, to.SlotName(0))
				_ = slots.Drop(context.Background(), at, to.SlotName(1))
			})
			if foreign == "streaming" {
				repl := stream(t, db, to.SlotName(1))
				t.Cleanup(func() { _ = repl.Close(context.Background()) })
			}
			res, err := slots.Reshard(ctx, cfg)
			if !errors.Is(err, want) || !strings.Contains(err.Error(), to.SlotName(1)) {
				t.Fatalf("Reshard with a foreign %s = %+v, %v; want %v naming it", to.SlotName(1), res, err, want)
			}
			if _, ok, err := registry.New(conn, "public").Get(ctx, to.SlotName(1)); err != nil || ok {
				t.Errorf("the foreign slot is recorded (%v)", err)
			}
		})
	}
}

// A relay of the new set may start while the rerun of a reshard still creates a slot. The slot is
// then in pg_replication_slots, held by the creating process, at no position yet. The relay must
// not record it: the old code recorded it at 0/0, the creator's record was then left out, and the
// reshard could never find its cut.
func TestRelayDoesNotRecordASlotBeingCreated(t *testing.T) {
	r := reshardToTwo(t)
	ctx, db, conn, cfg := t.Context(), r.db, r.conn, r.cfg
	last := r.to.SlotName(1)
	reg := registry.New(conn, "public")
	// As if the reshard was killed before it created the last slot.
	if err := slots.Drop(ctx, conn, last); err != nil {
		t.Fatal(err)
	}
	if err := reg.Forget(ctx, last); err != nil {
		t.Fatal(err)
	}
	// An open transaction with an id holds the creation of the slot until it ends.
	open := testenv.SharedPostgres(t).Conn(t, db)
	tx, err := open.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}
	rerun := make(chan error, 1)
	go func() {
		_, err := slots.Reshard(ctx, slots.ReshardConfig{Conn: testenv.SharedPostgres(t).Conn(t, db), DatabaseURL: db,
			Table: cfg.Table, Base: cfg.Base, Tables: cfg.Tables, Shards: 2})
		rerun <- err
	}()
	for {
		info, err := inspect.ReadSlot(ctx, conn, last)
		if err != nil {
			t.Fatal(err)
		}
		if info.Exists {
			break
		}
		select {
		case err := <-rerun:
			t.Fatalf("the rerun ended before it created %s: %v", last, err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	repl := replConn(t, db)
	sys, err := pglogrepl.IdentifySystem(ctx, repl)
	if err != nil {
		t.Fatal(err)
	}
	_, err = slots.Prepare(ctx, slots.PrepareConfig{Slot: last, Conn: repl, Primary: conn, SlotDB: conn, Registry: reg,
		System: sys, Xmin: func(pglogrepl.LSN) uint64 { return 0 }})
	if !errors.Is(err, slots.ErrSlotActive) {
		t.Errorf("Prepare of a slot being created = %v; want ErrSlotActive", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-rerun; err != nil {
		t.Fatalf("the rerun of the reshard: %v", err)
	}
	if rec, ok, err := reg.Get(ctx, last); err != nil || !ok || rec.CreatedLSN == 0 {
		t.Fatalf("record of %s = %+v, %t, %v; want its consistent point", last, rec, ok, err)
	}
}
