package faults_test

import (
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// walbox checks the slot against its record, then dials the broker, then sends START_REPLICATION.
// In between the slot is free, and any role with REPLICATION may advance it; the server then
// starts at the advanced position, whatever START_REPLICATION asked for, and the rows committed
// in between are skipped. Here the broker dial is held while a REPLICATION role (not a
// superuser) advances the slot past rows walbox never delivered. walbox must see it once it
// holds the slot, stop with the gap and its way out, and confirm nothing. A supervisor's restart
// must refuse the slot as well: the slot stays where it was moved, ahead of the record.
func TestSlotAdvancedBeforeItIsHeld(t *testing.T) {
	heavy(t)
	pg := testenv.SharedPostgres(t)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	v := w.startVerifier()
	cw := w.newWriter(checker.WriterConfig{Seed: 47})
	if err := cw.Tx(t.Context(), 10); err != nil { // the rows the advance skips
		t.Fatal(err)
	}
	checked := w.confirmedLSN()

	role := testenv.UniqueName("mover")
	w.exec("CREATE ROLE " + role + " LOGIN REPLICATION")
	u, err := url.Parse(w.db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	mover := pg.Conn(t, u.String())

	hold := newHoldProxy(t, hostOf(t, w.rabbit.URL()))
	w.relayMQ = withHost(t, w.rabbit.URL(), hold.addr)
	r := w.startRelay()
	select {
	case <-hold.held: // the slot was checked; START_REPLICATION waits for the broker
	case <-time.After(time.Minute):
		t.Fatalf("walbox never dialled the broker:\n%s", testenv.Tail(r.Output(), 20))
	}
	if _, err := mover.Exec(t.Context(), "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", w.slot); err != nil {
		t.Fatalf("advance the slot as %s: %v", role, err)
	}
	advanced := w.confirmedLSN()
	if advanced <= checked {
		t.Fatalf("the slot is at %s after the advance, not past %s", advanced, checked)
	}
	close(hold.release)

	w.relayMQ = w.rabbit.URL()
	for i, rr := range []*relay{r, w.startRelay()} { // the process that was held, then a restart
		code := rr.Wait(time.Minute)
		out := rr.Output()
		if code == 0 || !strings.Contains(out, "ahead of "+checked.String()) || !strings.Contains(out, "walbox recover") {
			t.Fatalf("relay %d exited %d on a slot advanced to %s; want non-zero and the gap from %s with its way out:\n%s",
				i, code, advanced, checked, testenv.Tail(out, 20))
		}
		t.Logf("relay %d exited %d: %s", i, code, lastLine(out, "relay stopped"))
	}
	if !strings.Contains(r.Output(), "before walbox held it") {
		t.Errorf("the held relay did not say the slot moved before it held it:\n%s", testenv.Tail(r.Output(), 20))
	}
	if got := w.confirmedLSN(); got != advanced {
		t.Errorf("walbox moved the advanced slot from %s to %s", advanced, got)
	}
	if n := v.Count(); n != 0 {
		t.Errorf("%d messages delivered from a slot past the rows", n)
	}
}

// holdProxy forwards TCP connections to upstream, but holds the first one, accepted, until release
// is closed: walbox's first broker connection, which it opens between the slot check and
// START_REPLICATION.
type holdProxy struct {
	addr          string
	held, release chan struct{}
}

func newHoldProxy(t *testing.T, upstream string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{addr: ln.Addr().String(), held: make(chan struct{}), release: make(chan struct{})}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		select {
		case <-p.release:
		default:
			close(p.release) // a test that failed while it held the connection
		}
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	first := true
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if first {
				first = false
				close(p.held)
				<-p.release
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	return p
}

// The same window with --replication-url: the slot lives on a standby (PostgreSQL 16+ decodes
// there), the record on the primary. A REPLICATION role advances the standby's slot past rows
// the standby replayed and walbox never delivered, while walbox dials the broker. walbox reads the
// slot again on the standby once it holds it, stops with the gap, and a restart refuses it too.
func TestSlotOnAStandbyAdvancedBeforeItIsHeld(t *testing.T) {
	heavy(t)
	w, _, _, replURL := standbyPair(t)
	standbyEnv := "WALBOX_REPLICATION_URL=" + replURL
	v := w.startVerifier()
	cw := w.newWriter(checker.WriterConfig{Seed: 48})
	if err := cw.Tx(t.Context(), 10); err != nil { // the rows the advance skips
		t.Fatal(err)
	}
	written := w.walLSN()
	waitFor(t, time.Minute, "the standby to replay the rows", func() bool {
		var ok bool
		return execRow(t, replURL, "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", &ok, written.String()) == nil && ok
	})
	slotLSN := func() pglogrepl.LSN {
		var at pglogrepl.LSN
		if err := readLSN(replURL, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", &at, w.slot); err != nil {
			t.Fatal(err)
		}
		return at
	}
	checked := slotLSN()

	role := testenv.UniqueName("mover")
	w.exec("CREATE ROLE " + role + " LOGIN REPLICATION")
	u, err := url.Parse(replURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	waitFor(t, time.Minute, "the role on the standby", func() bool {
		var ok bool
		return execRow(t, u.String(), "SELECT true", &ok) == nil
	})

	hold := newHoldProxy(t, hostOf(t, w.rabbit.URL()))
	w.relayMQ = withHost(t, w.rabbit.URL(), hold.addr)
	r := w.startRelay(standbyEnv)
	select {
	case <-hold.held: // the slot was checked; START_REPLICATION waits for the broker
	case <-time.After(2 * time.Minute):
		t.Fatalf("walbox never dialled the broker:\n%s", testenv.Tail(r.Output(), 20))
	}
	var moved string
	if err := execRow(t, u.String(), "SELECT end_lsn::text FROM pg_replication_slot_advance($1, pg_last_wal_replay_lsn())", &moved, w.slot); err != nil {
		t.Fatalf("advance the standby's slot as %s: %v", role, err)
	}
	advanced := slotLSN()
	if advanced <= checked || advanced < written {
		t.Fatalf("the standby's slot is at %s after the advance, not past the rows (%s, checked at %s)", advanced, written, checked)
	}
	close(hold.release)

	w.relayMQ = w.rabbit.URL()
	for i, rr := range []*relay{r, w.startRelay(standbyEnv)} { // the process that was held, then a restart
		code := rr.Wait(2 * time.Minute)
		out := rr.Output()
		if code == 0 || !strings.Contains(out, "slot "+w.slot+" is at "+advanced.String()) || !strings.Contains(out, "walbox recover") {
			t.Fatalf("relay %d exited %d on a standby's slot advanced to %s; want non-zero and the gap with its way out:\n%s",
				i, code, advanced, testenv.Tail(out, 20))
		}
		t.Logf("relay %d exited %d: %s", i, code, lastLine(out, "relay stopped"))
	}
	if !strings.Contains(r.Output(), "before walbox held it") {
		t.Errorf("the held relay did not say the slot moved before it held it:\n%s", testenv.Tail(r.Output(), 20))
	}
	if got := slotLSN(); got != advanced {
		t.Errorf("walbox moved the advanced slot from %s to %s", advanced, got)
	}
	if n := v.Count(); n != 0 {
		t.Errorf("%d messages delivered from a slot past the rows", n)
	}
}
