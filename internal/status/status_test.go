package status_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/status"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/slots"
)

func setup(t *testing.T, cfg migrations.Config) (string, *pgx.Conn, status.Query) {
	t.Helper()
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	db, conn := testenv.SharedPostgres(t).MigratedDatabase(t, cfg)
	return db, conn, status.Query{Slot: testenv.UniqueName("slot"), Publication: "walbox", Table: outbox.DefaultTable,
		Prefix: outbox.DefaultMessagePrefix}
}

func read(t *testing.T, conn *pgx.Conn, q status.Query) status.Report {
	t.Helper()
	r, err := status.Read(t.Context(), conn, q)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ensureSlot(t *testing.T, db string, conn *pgx.Conn, slot string) {
	t.Helper()
	if _, err := slots.EnsureSlot(t.Context(), db, slot, "walbox", []outbox.Table{outbox.DefaultTable}, registry.New(conn, "public")); err != nil {
		t.Fatal(err)
	}
}

func TestSingleSlot(t *testing.T) {
	db, conn, q := setup(t, migrations.Config{})
	r := read(t, conn, q)
	if err := r.Verdict(false, ""); err == nil || !strings.Contains(err.Error(), "slot "+q.Slot+" does not exist") {
		t.Errorf("missing slot: verdict %v, want one naming the slot", err)
	}
	ensureSlot(t, db, conn, q.Slot)
	r = read(t, conn, q)
	if !r.Exists || r.Plugin != "pgoutput" || r.WALStatus == nil || r.LagBytes == nil || r.Shards != nil {
		t.Errorf("report %+v: want the existing pgoutput slot with its lag and wal_status, no shards", r)
	}
	if r.MessagePrefix != outbox.DefaultMessagePrefix || !r.EmitFunction {
		t.Errorf("messages: prefix %q, emit function %t, want %q and true", r.MessagePrefix, r.EmitFunction, outbox.DefaultMessagePrefix)
	}
	if err := r.Verdict(false, ""); err != nil {
		t.Errorf("verdict: %v, want nil", err)
	}
	q.Prefix = ""
	if r := read(t, conn, q); r.MessagePrefix != "" {
		t.Errorf("messages off: prefix %q", r.MessagePrefix)
	}
}

// With the table split into shards, each shard's slot is listed, and a missing one fails.
func TestShards(t *testing.T) {
	db, conn, q := setup(t, migrations.Config{NoPublication: true})
	set := shard.Set{Slot: q.Slot, Publication: q.Publication, N: 2}
	if _, err := shard.CreatePublications(t.Context(), conn, q.Table, set); err != nil {
		t.Fatal(err)
	}
	ensureSlot(t, db, conn, set.SlotName(0))
	r := read(t, conn, q)
	if len(r.Shards) != 1 || r.Shards[0].Shards != 2 || len(r.Shards[0].Slots) != 2 {
		t.Fatalf("shards %+v: want one set of two", r.Shards)
	}
	if s := r.Shards[0].Slots[0]; !s.Exists || s.Publication != set.PublicationName(0) || s.Slot != set.SlotName(0) {
		t.Errorf("shard 0: %+v", s)
	}
	err := r.Verdict(false, "")
	if err == nil || !strings.Contains(err.Error(), "slot "+set.SlotName(1)+" does not exist") {
		t.Errorf("verdict %v: want one naming the missing slot of shard 1", err)
	}
	ensureSlot(t, db, conn, set.SlotName(1))
	if err := read(t, conn, q).Verdict(false, ""); err != nil {
		t.Errorf("every shard's slot there, the single slot not: verdict %v, want nil", err)
	}
}

func TestVerdictOnTheRelay(t *testing.T) {
	r := status.Report{Slot: "s", Exists: true}
	if err := r.Verdict(true, "http://x"); err == nil || err.Error() != "relay not reachable at http://x" {
		t.Errorf("no relay: %v", err)
	}
	r.Relay = &status.Relay{State: "failed", LastError: "boom"}
	if err := r.Verdict(true, "http://x"); err == nil || err.Error() != "relay is failed: boom" {
		t.Errorf("failed relay: %v", err)
	}
	if err := r.Verdict(false, "http://x"); err != nil {
		t.Errorf("failed relay not required: %v", err)
	}
	for _, state := range []string{"streaming", "standby"} {
		r.Relay.State = state
		if err := r.Verdict(true, "http://x"); err != nil {
			t.Errorf("%s: %v", state, err)
		}
	}
	lost := "lost"
	r.WALStatus = &lost
	if err := r.Verdict(true, "http://x"); err == nil || !strings.Contains(err.Error(), "wal_status lost") {
		t.Errorf("lost slot: %v", err)
	}
}

func TestFetchRelay(t *testing.T) {
	want := status.Relay{State: "streaming", Slot: "walbox", Confirmed: 7, Broker: "mq:5672"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(want)
	}))
	defer srv.Close()
	got, err := status.FetchRelay(t.Context(), srv.URL+"/")
	if err != nil || *got != want {
		t.Errorf("FetchRelay = %+v, %v, want %+v", got, err, want)
	}
	if _, err := status.FetchRelay(t.Context(), srv.URL+"/nope"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("FetchRelay of a path without /status: %v, want a 404 error", err)
	}
}

// A retire stopped midway leaves the old set with a slot dropped and forgotten. The status names
// that and the way out, not a slot that does not exist, which reads as a lost one.
func TestShardsRetireStoppedMidway(t *testing.T) {
	db, conn, q := setup(t, migrations.Config{NoPublication: true})
	set := shard.Set{Slot: q.Slot, Publication: q.Publication, N: 2}
	if _, err := shard.CreatePublications(t.Context(), conn, q.Table, set); err != nil {
		t.Fatal(err)
	}
	for k := range 2 {
		ensureSlot(t, db, conn, set.SlotName(k))
	}
	cfg := slots.ReshardConfig{Conn: conn, DatabaseURL: db, Table: q.Table, Base: shard.Set{Slot: q.Slot, Publication: q.Publication},
		Tables: []outbox.Table{q.Table}, Shards: 3}
	if _, err := slots.Reshard(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	to := shard.Set{Slot: q.Slot, Publication: q.Publication, N: 3}
	t.Cleanup(func() {
		for k := range 3 {
			_ = slots.Drop(context.Background(), conn, to.SlotName(k))
		}
		_ = slots.Drop(context.Background(), conn, set.SlotName(1))
	})
	// As retire leaves slot 0 of the old set when killed at retire.forgot.
	if err := slots.Drop(t.Context(), conn, set.SlotName(0)); err != nil {
		t.Fatal(err)
	}
	if err := registry.New(conn, "public").Forget(t.Context(), set.SlotName(0)); err != nil {
		t.Fatal(err)
	}
	err := read(t, conn, q).Verdict(false, "")
	if err == nil || strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "--shards 3 --retire again") {
		t.Errorf("verdict %v: want one saying a retire stopped midway, to run again, and no slot that does not exist", err)
	}
}
