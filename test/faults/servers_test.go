package faults_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// A load-balanced read-only service over two standbys of one primary, given as --replication-url:
// walbox's replication connection reaches one standby, its SQL connection to the same URL the
// other. Both report the primary's system identifier, and the same timeline. walbox would check
// the slot on one standby and stream from the other: it must stop before it touches the slot,
// in one line saying that two servers answer the URL, and leave the slot and its record alone.
func TestRunRefusesTwoStandbysBehindOneURL(t *testing.T) {
	heavy(t)
	w, primary, standby, replURL := standbyPair(t)
	other := testenv.StartStandby(t, primary, "standby2", testenv.WithSetting("hot_standby_feedback", "on"))
	otherURL := withHost(t, w.db, hostOf(t, other.URL()))
	waitFor(t, time.Minute, "the database on the second standby", func() bool {
		var n int
		return execRow(t, otherURL, "SELECT count(*) FROM public.outbox", &n) == nil
	})
	var before string
	if err := execRow(t, w.db, "SELECT confirmed_lsn::text FROM public.walbox_slots WHERE slot_name = $1", &before, w.slot); err != nil {
		t.Fatal(err)
	}
	// The service: walbox's replication connection reaches the standby that holds the slot, its
	// SQL connections the other standby.
	lb := newSplitProxy(t, hostOf(t, standby.URL()), hostOf(t, other.URL()))
	r := w.startRelay("WALBOX_REPLICATION_URL=" + withHost(t, replURL, lb.addr))
	code := r.Wait(2 * time.Minute)
	out := r.Output()
	if code == 0 || !strings.Contains(out, "reach different servers") || !strings.Contains(out, "--replication-url") {
		t.Fatalf("walbox run exited %d with its connections on two standbys; want a stop naming two servers behind --replication-url:\n%s",
			code, testenv.Tail(out, 20))
	}
	if strings.Contains(out, "walbox recover") {
		t.Errorf("walbox sends the user to walbox recover for a URL that reaches two servers:\n%s", testenv.Tail(out, 20))
	}
	t.Logf("walbox run exited %d: %s", code, lastLine(out, "relay stopped"))
	var after string
	if err := execRow(t, w.db, "SELECT confirmed_lsn::text FROM public.walbox_slots WHERE slot_name = $1", &after, w.slot); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("the record moved from %s to %s", before, after)
	}
	var onOther bool
	if err := execRow(t, otherURL, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", &onOther, w.slot); err != nil {
		t.Fatal(err)
	}
	if onOther {
		t.Errorf("walbox created slot %s on the second standby", w.slot)
	}
}

// splitProxy forwards PostgreSQL connections by their startup packet: replication connections
// to repl, the others to rest. A load-balanced service over two servers may pair them so.
type splitProxy struct{ addr string }

func newSplitProxy(t *testing.T, repl, rest string) *splitProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	forward := func(c net.Conn) {
		defer wg.Done()
		startup, err := readStartup(c)
		if err != nil {
			_ = c.Close()
			return
		}
		upstream := rest
		if bytes.Contains(startup, []byte("replication\x00")) {
			upstream = repl
		}
		up, err := net.Dial("tcp", upstream)
		if err != nil {
			_ = c.Close()
			return
		}
		mu.Lock()
		conns = append(conns, c, up)
		mu.Unlock()
		if _, err := up.Write(startup); err != nil {
			_ = c.Close()
			_ = up.Close()
			return
		}
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
		_, _ = io.Copy(c, up)
		_ = c.Close()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go forward(c)
		}
	}()
	return &splitProxy{addr: ln.Addr().String()}
}

// readStartup reads a client's startup packet, declining an SSL or GSS encryption request first.
func readStartup(c net.Conn) ([]byte, error) {
	for {
		head := make([]byte, 8)
		if _, err := io.ReadFull(c, head); err != nil {
			return nil, err
		}
		n := binary.BigEndian.Uint32(head)
		if code := binary.BigEndian.Uint32(head[4:]); n == 8 && (code == 80877103 || code == 80877104) {
			if _, err := c.Write([]byte{'N'}); err != nil {
				return nil, err
			}
			continue
		}
		if n < 8 || n > 1<<16 {
			return nil, io.ErrUnexpectedEOF
		}
		rest := make([]byte, n-8)
		if _, err := io.ReadFull(c, rest); err != nil {
			return nil, err
		}
		return append(head, rest...), nil
	}
}

// Two standbys of one primary, both promoted (a split brain), behind one --database-url (a
// load-balanced read-write service): the same system identifier and the same timeline. walbox's
// replication connection reaches one, its SQL connection the other. It must stop before it
// touches a slot, saying that two servers answer the URL, not send the user to walbox recover.
func TestRunRefusesTwoPromotedStandbysBehindOneURL(t *testing.T) {
	heavy(t)
	primary := testenv.StartPostgres(t)
	testenv.RequireOwn(t, primary)
	w := newWorld(t, primary, testenv.SharedRabbit(t))
	var urls []string
	for _, name := range []string{"standby1", "standby2"} {
		s := testenv.StartStandby(t, primary, name)
		u := withHost(t, w.db, hostOf(t, s.URL()))
		waitFor(t, time.Minute, "the database on "+name, func() bool {
			var n int
			return execRow(t, u, "SELECT count(*) FROM public.walbox_slots", &n) == nil && n > 0
		})
		s.Promote(t)
		urls = append(urls, u)
	}
	lb := newSplitProxy(t, hostOf(t, urls[0]), hostOf(t, urls[1]))
	w.relayDB = withHost(t, w.db, lb.addr)
	r := w.startRelay()
	code := r.Wait(2 * time.Minute)
	out := r.Output()
	if code == 0 || !strings.Contains(out, "reach different servers") || !strings.Contains(out, "--database-url") {
		t.Fatalf("walbox run exited %d with its connections on two promoted standbys; want a stop naming two servers behind --database-url:\n%s",
			code, testenv.Tail(out, 20))
	}
	if strings.Contains(out, "walbox recover") {
		t.Errorf("walbox sends the user to walbox recover for a URL that reaches two servers:\n%s", testenv.Tail(out, 20))
	}
	t.Logf("walbox run exited %d: %s", code, lastLine(out, "relay stopped"))
	for i, u := range urls {
		var n int
		if err := execRow(t, u, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", &n, w.slot); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("walbox created slot %s on promoted standby %d", w.slot, i+1)
		}
	}
}
