package faults_test

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// The outbox table changes shape while rows stream: columns added (with a constant default, and
// with a volatile one that rewrites the table), optional columns dropped, and the relay killed
// in between so that a replay crosses the changes. Every row must arrive, in order.
func TestSchemaChangeMidStream(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v := w.startVerifier()
	wr := w.startWriter(checker.WriterConfig{Seed: 51, Pause: 10 * time.Millisecond})
	r := w.startRelay()
	changes := []string{
		"ALTER TABLE outbox ADD COLUMN tenant text NOT NULL DEFAULT 'acme'",
		"ALTER TABLE outbox DROP COLUMN headers",
		"kill",
		"ALTER TABLE outbox ADD COLUMN shard int DEFAULT (random() * 16)::int", // rewrites the table
		"ALTER TABLE outbox DROP COLUMN created_at",
		"ALTER TABLE outbox DROP COLUMN tenant",
	}
	for _, c := range changes {
		w.progress(v, 200, time.Minute)
		if c == "kill" {
			r.Kill()
			r = w.startRelay()
			continue
		}
		if _, err := w.conn.Exec(context.Background(), c); err != nil {
			t.Fatalf("%s: %v", c, err)
		}
	}
	w.progress(v, 200, time.Minute)
	wr.stop()
	w.verdict(wr.Writer, v, 2*time.Minute, 1, len(changes), "schema_changes=5 kills=1")
}

// A single transaction of 100,000 rows: rows are published as they stream in (the relay's memory
// is bounded by its window, not by the transaction), the relay is killed halfway, and after a
// restart the whole transaction arrives. Progress inside a transaction cannot be confirmed, so
// the slot must still be before it at the kill.
//
// Peak RSS is read from /proc/<pid>/status (VmHWM). The suite builds the binary with -race, whose
// shadow memory inflates it several times over: the bound is 150 MiB for such a binary, 64 MiB for
// a plain one (WALBOX_FAULTS_BIN). Measured: about 70 and 26 MiB.
func TestHugeTransactionKilledHalfway(t *testing.T) {
	heavy(t)
	t.Parallel() // overlaps TestBrokerFaults, which mostly waits
	const rows = 100_000
	race := raceBuilt(t)
	bound := int64(64 << 20)
	if race {
		bound = 150 << 20
	}
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v := w.startVerifier()
	cw := w.newWriter(checker.WriterConfig{Seed: 52, Aggregates: 16})
	ctx := context.Background()
	if err := cw.Tx(ctx, 10); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cw.Tx(ctx, rows); err != nil {
		t.Fatal(err)
	}
	// The big transaction's commit record ends at or before this position.
	var committed pglogrepl.LSN
	if err := w.conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()").Scan(&committed); err != nil {
		t.Fatal(err)
	}
	t.Logf("committed %d rows in one transaction in %v", rows, time.Since(start).Round(time.Millisecond))
	if err := cw.Tx(ctx, 10); err != nil {
		t.Fatal(err)
	}

	r := w.startRelay()
	var published uint64
	moved := time.Now()
	waitFor(t, 3*time.Minute, "half the transaction published", func() bool {
		st, err := r.status()
		if err == nil && st.Published != published {
			published, moved = st.Published, time.Now()
		}
		if time.Since(moved) > 45*time.Second {
			t.Fatalf("no publish for 45 s at %d of %d\n%s", published, rows, w.relayStates())
		}
		return published >= rows/2
	})
	peak1, err := r.peakRSS()
	if err != nil {
		t.Fatal(err)
	}
	r.Kill()
	delivered := v.Count()
	// The slot may have moved into the transaction's WAL: while the server reads it, before it
	// decodes the commit, the relay has nothing in flight and may confirm the keepalives' WAL
	// end, as PostgreSQL's own subscribers do. A restart still replays every transaction whose
	// commit lies after the slot. It must not have reached the commit.
	if slot := w.slotLSN(); slot >= committed {
		t.Fatalf("the slot moved to %s, past the commit of the unfinished transaction (before %s)", slot, committed)
	}
	if delivered >= rows {
		t.Fatalf("%d delivered before the kill: the kill did not land mid-transaction", delivered)
	}
	t.Logf("killed with %d of %d rows delivered", delivered, rows+20)

	r = w.startRelay()
	rep := w.verdict(cw, v, 5*time.Minute, 1, 1, "")
	peak2, err := r.peakRSS()
	if err != nil {
		t.Fatal(err)
	}
	peak := max(peak1, peak2)
	t.Logf("SUMMARY %s peak_rss_mib=%.1f (first run %.1f, after restart %.1f; race-built binary: %t, bound %d MiB) duplicated=%d took=%v",
		t.Name(), mib(peak), mib(peak1), mib(peak2), race, bound>>20, rep.Duplicated, time.Since(start).Round(time.Second))
	if peak > bound {
		t.Errorf("peak RSS %.1f MiB over the bound of %d MiB", mib(peak), bound>>20)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// raceBuilt reports whether the walbox binary under test was built with the race detector.
func raceBuilt(t *testing.T) bool {
	t.Helper()
	info, err := buildinfo.ReadFile(walboxBin(t))
	if err != nil {
		t.Fatalf("read build info of %s: %v", walboxBin(t), err)
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// slotLSN returns the slot's confirmed_flush_lsn.
func (w *world) slotLSN() pglogrepl.LSN {
	w.t.Helper()
	var s string
	if err := w.conn.QueryRow(context.Background(),
		"SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", w.slot).Scan(&s); err != nil {
		w.t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		w.t.Fatal(fmt.Errorf("slot lsn %q: %w", s, err))
	}
	return lsn
}
