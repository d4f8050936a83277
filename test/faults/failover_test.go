package faults_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// A PostgreSQL 17 primary and a hot standby that synchronises walbox's failover slot; the primary
// is killed under load and the standby promoted. The walbox process that was given both hosts in
// one URL (target_session_attrs=read-write) goes on by itself from the synchronised slot: every
// row of the new primary's table is delivered, and nothing that is not in it (a phantom: a row
// the old primary committed but the standby never had). It reports the time from the promotion
// to walbox's first confirm on the new primary.
func TestPrimaryFailsOverToAStandby(t *testing.T) {
	heavy(t)
	primary, standby := testenv.StartFailoverPair(t,
		testenv.WithSetting("sync_replication_slots", "on"), testenv.WithSetting("hot_standby_feedback", "on"))
	rabbit := testenv.SharedRabbit(t)

	w := newWorld(t, primary, rabbit)
	both := bothHosts(t, w.db, standby.Port())
	w.relayDB = both
	standbyDB := withHost(t, w.db, hostOf(t, standby.URL()))

	wr := w.startWriter(checker.WriterConfig{DatabaseURL: both, MaxTx: 5, Pause: 5 * time.Millisecond, Seed: uint64(time.Now().UnixNano())})
	v := w.startVerifier()
	r := w.startRelay()
	waitDelivered(t, v, 300, 2*time.Minute)
	// The standby's copy of the slot is usable once the relay has advanced it (until then it is
	// temporary): only then can walbox go on from it.
	waitFor(t, time.Minute, "the standby to synchronise the slot", func() bool {
		var ok bool
		err := execRow(t, standbyDB, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND synced AND NOT temporary)", &ok, w.slot)
		return err == nil && ok
	})
	waitDelivered(t, v, v.Count()+300, time.Minute)

	primary.Stop(t, "immediate")
	delivered := v.Count()
	standby.Promote(t)
	promoted := time.Now()
	var atPromotion pglogrepl.LSN
	if err := readLSN(standbyDB, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", &atPromotion, w.slot); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "walbox's first confirm on the new primary", func() bool {
		var now pglogrepl.LSN
		return readLSN(standbyDB, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", &now, w.slot) == nil &&
			now > atPromotion
	})
	firstConfirm := time.Since(promoted) // at most a poll late
	t.Logf("promotion to the first confirm on the new primary: %v (promoted at %s, %d delivered before the kill)",
		firstConfirm.Round(time.Millisecond), promoted.Format(time.TimeOnly), delivered)
	waitDelivered(t, v, delivered+300, 2*time.Minute)
	wr.stop()
	if r.Exited() {
		t.Fatalf("walbox exited at the failover:\n%s", r.Output())
	}
	if !strings.Contains(r.Output(), "connected to another server") {
		t.Errorf("walbox did not log the new server and timeline:\n%s", r.Output())
	}

	// The truth is the new primary's table.
	rows := tableIDs(t, standbyDB)
	waitFor(t, 2*time.Minute, "every row of the new primary delivered", func() bool { return len(missing(rows, v)) == 0 })
	got := map[string]bool{}
	dups := 0
	for _, d := range v.Deliveries() {
		if got[d.ID] {
			dups++
		}
		got[d.ID] = true
	}
	phantoms := 0
	for id := range got {
		if !rows[id] {
			phantoms++
		}
	}
	lost := len(missing(rows, v))
	t.Logf("SUMMARY %s rows=%d delivered=%d lost=%d phantom=%d duplicates=%d promotion_to_first_confirm=%v",
		t.Name(), len(rows), len(got), lost, phantoms, dups, firstConfirm.Round(time.Millisecond))
	if lost != 0 || phantoms != 0 {
		t.Errorf("%d lost, %d phantom: want none\n%s", lost, phantoms, r.Output())
	}
	if len(rows) == 0 {
		t.Error("the new primary has no rows: the test proved nothing")
	}
}

// bothHosts returns db's URL with the standby's port as a second host, and
// target_session_attrs=read-write: libpq and pgx try each and keep the primary.
func bothHosts(t *testing.T, db string, standbyPort int) string {
	t.Helper()
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = fmt.Sprintf("%s,%s:%d", u.Host, u.Hostname(), standbyPort)
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	return u.String()
}

func execRow(t *testing.T, db, sql string, dest any, args ...any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql, args...).Scan(dest)
}

func readLSN(db, sql string, dest *pglogrepl.LSN, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var text string
	if err := conn.QueryRow(ctx, sql, args...).Scan(&text); err != nil {
		return err
	}
	*dest, err = pglogrepl.ParseLSN(text)
	return err
}

// tableIDs reads the ids of the outbox table at db.
func tableIDs(t *testing.T, db string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT id::text FROM public.outbox")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// missing returns the ids of rows that v has not received.
func missing(rows map[string]bool, v *checker.Verifier) []string {
	got := map[string]bool{}
	for _, d := range v.Deliveries() {
		got[d.ID] = true
	}
	var out []string
	for id := range rows {
		if !got[id] {
			out = append(out, id)
		}
	}
	return out
}
