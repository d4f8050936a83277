package publisher

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// pipeCoalescer returns a coalescer writing into a pipe and the pipe's reading end.
// Its write timeout is 10 s: a reader starved on busy cores must not fail a write.
func pipeCoalescer(t testing.TB, delay time.Duration, failed func(error) error) (*coalescer, net.Conn) {
	t.Helper()
	return pipeCoalescerTimeout(t, delay, failed, 10*time.Second)
}

// pipeCoalescerTimeout is pipeCoalescer with the write timeout timeout.
func pipeCoalescerTimeout(t testing.TB, delay time.Duration, failed func(error) error, timeout time.Duration) (*coalescer, net.Conn) {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	defer SetCoalesceDelay(delay)()
	return newCoalescer(writeBound{Conn: client, timeout: timeout}, failed), server
}

// readExactly reads want from r, failing if it does not come within 10 s.
func readExactly(t testing.TB, r net.Conn, want string) {
	t.Helper()
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != want {
		t.Fatalf("read %q, %v; want %q", got, err, want)
	}
}

// nothingToRead fails if r has something to read within d.
func nothingToRead(t testing.TB, r net.Conn, d time.Duration) {
	t.Helper()
	r.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	if n, err := r.Read(b[:]); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q, %v; want nothing written yet", b[:n], err)
	}
}

// Writes made while holding wait for writeNow, and go out in one write; any write made while not
// holding (a heartbeat, a declaration) goes out at once, after what was held, in order.
func TestCoalescerHoldsOnlyPublishes(t *testing.T) {
	w, r := pipeCoalescer(t, time.Hour, nil)
	w.holding(true)
	for _, p := range []string{"pub1", "pub2"} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("held Write: %d, %v", n, err)
		}
	}
	w.holding(false)
	nothingToRead(t, r, 50*time.Millisecond)

	go w.Write([]byte("beat"))
	readExactly(t, r, "pub1pub2beat")

	w.holding(true)
	w.Write([]byte("pub3"))
	w.holding(false)
	go w.writeNow()
	readExactly(t, r, "pub3")
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.writes != 2 {
		t.Errorf("socket writes: %d, want 2", w.writes)
	}
}

// What is held goes out by itself once the delay has passed, or at once when the size bound is
// reached.
func TestCoalescerWritesByItself(t *testing.T) {
	w, r := pipeCoalescer(t, 20*time.Millisecond, nil)
	w.holding(true)
	w.Write([]byte("pub1"))
	readExactly(t, r, "pub1") // after the delay

	big := make([]byte, coalesceBytes)
	done := make(chan struct{})
	go func() { w.Write(big); close(done) }()
	r.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := io.ReadFull(r, big); err != nil {
		t.Fatalf("a write of the size bound is not written at once: %v", err)
	}
	<-done
}

// A held write that the broker never takes fails at the write timeout: the failure is reported
// to the session (which cuts the connection) and every later write fails too.
func TestCoalescerStuckWriteNowFails(t *testing.T) {
	failed := make(chan error, 1)
	w, _ := pipeCoalescerTimeout(t, time.Hour, func(err error) error { failed <- err; return err }, 200*time.Millisecond)
	w.holding(true)
	w.Write([]byte("pub1")) // nobody reads the pipe
	start := time.Now()
	err := w.writeNow()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("writeNow into a stalled pipe: %v, want os.ErrDeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("writeNow failed after %v, want about the 200ms write timeout", d)
	}
	select {
	case got := <-failed:
		if !errors.Is(got, os.ErrDeadlineExceeded) {
			t.Errorf("failure reported: %v", got)
		}
	default:
		t.Error("the failure was not reported")
	}
	if _, err := w.Write([]byte("beat")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Write after a failed flush: %v, want the same failure", err)
	}
}

// flushSoon(true) writes at once when the next call is not expected within the group span (7/10
// of the delay) of the first byte held; when it is, what is held waits for that call, which
// writes them all once the next is no longer expected within the span.
func TestCoalescerFlushSoonWaitsOnlyForWhatIsExpected(t *testing.T) {
	withRetries(t, 3, flushSoonWaitsOnlyForWhatIsExpected)
}

// withRetries runs check up to n times and fails t only if every run fails. The check sleeps
// and reads with short deadlines, so a loaded machine can fail one run; a broken rule fails all.
func withRetries(t *testing.T, n int, check func(testing.TB)) {
	t.Helper()
	var last []string
	for i := 0; i < n; i++ {
		a := &attempt{TB: t}
		done := make(chan struct{})
		go func() { defer close(done); check(a) }()
		<-done
		if len(a.failures) == 0 {
			return
		}
		last = a.failures
		t.Logf("run %d of %d failed: %s", i+1, n, strings.Join(a.failures, "; "))
	}
	t.Errorf("every run failed; the last: %s", strings.Join(last, "; "))
}

// attempt is a testing.TB whose failures are kept, not reported: Fatal ends only the attempt.
type attempt struct {
	testing.TB
	failures []string
}

func (a *attempt) Helper() {}

func (a *attempt) Errorf(format string, args ...any) {
	a.failures = append(a.failures, fmt.Sprintf(format, args...))
}

func (a *attempt) Fatalf(format string, args ...any) {
	a.Errorf(format, args...)
	runtime.Goexit()
}

func (a *attempt) Error(args ...any) { a.failures = append(a.failures, fmt.Sprint(args...)) }

func (a *attempt) Fatal(args ...any) {
	a.Error(args...)
	runtime.Goexit()
}

func flushSoonWaitsOnlyForWhatIsExpected(t testing.TB) {
	w, r := pipeCoalescer(t, 100*time.Millisecond, nil)
	publish(w, "pub1") // a fresh connection expects nothing
	go w.flushSoon(true)
	readExactly(t, r, "pub1")

	pub := func(p string) { publishAtPace(w, p, 20*time.Millisecond) } // calls come every 20 ms
	pub("pub2")
	w.flushSoon(true)
	time.Sleep(20 * time.Millisecond)
	pub("pub3")
	w.flushSoon(true)
	nothingToRead(t, r, 35*time.Millisecond) // pub4 is expected within 70 ms of pub2
	pub("pub4")
	start := time.Now()
	go w.flushSoon(true) // 55 ms after pub2: the next is no longer expected within 70 ms of it
	readExactly(t, r, "pub2pub3pub4")
	if d := time.Since(start); d > 30*time.Millisecond {
		t.Errorf("written %v after the flush, want at once", d)
	}

	// Calls every 80 ms: nothing would join. Then, after that lone write, calls every 64 ms: a
	// partner due within the span but beyond half the delay is not waited for either, or at a
	// slow pace a message would wait most of the delay.
	for i, gap := range []time.Duration{80 * time.Millisecond, 64 * time.Millisecond} {
		p := fmt.Sprintf("pub%d", 5+i)
		publishAtPace(w, p, gap)
		start = time.Now()
		go w.flushSoon(true)
		readExactly(t, r, p)
		if d := time.Since(start); d > 30*time.Millisecond {
			t.Errorf("%s written %v after the flush, want at once", p, d)
		}
	}
}

// publish writes p as a publish: held, as Session.Publish writes its frames.
func publish(w *coalescer, p string) {
	w.holding(true)
	w.Write([]byte(p))
	w.holding(false)
}

// publishAtPace is publish, then sets the average time between flushSoon calls to gap.
func publishAtPace(w *coalescer, p string, gap time.Duration) {
	publish(w, p)
	w.mu.Lock()
	w.gap = gap
	w.mu.Unlock()
}

// At a pace where only pairs could form, a message held alone waits for a partner only after a
// write that went alone: every other time. A third of the messages wait, not half.
func TestCoalescerPairsEveryOtherTime(t *testing.T) {
	w, r := pipeCoalescer(t, 100*time.Millisecond, nil)
	// A partner within half the delay; no three in the span.
	pub := func(p string) { publishAtPace(w, p, 45*time.Millisecond) }
	pub("pub1") // a fresh connection expects nothing: a write alone
	go w.flushSoon(true)
	readExactly(t, r, "pub1")

	pub("pub2") // after a lone write: waits for a partner
	w.flushSoon(true)
	nothingToRead(t, r, 30*time.Millisecond)
	pub("pub3")
	go w.flushSoon(true)
	readExactly(t, r, "pub2pub3")

	pub("pub4") // after a pair: at once
	start := time.Now()
	go w.flushSoon(true)
	readExactly(t, r, "pub4")
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("pub4 written %v after the flush, want at once (the timer would take 100ms)", d)
	}
	pub("pub5") // after a lone write again: waits
	w.flushSoon(true)
	nothingToRead(t, r, 30*time.Millisecond)
	go w.writeNow()
	readExactly(t, r, "pub5")
}

// At a pace where three calls fit in the group span, a message held alone waits even after a
// write that carried a group, and a pair waits for its third: each write carries three calls.
func TestCoalescerGroupsThreesAtAFastPace(t *testing.T) {
	w, r := pipeCoalescer(t, 100*time.Millisecond, nil)
	pub := func(p string) { publishAtPace(w, p, 25*time.Millisecond) } // three calls within the span (70 ms)
	held := func(p string) {
		t.Helper()
		pub(p)
		if err := w.flushSoon(true); err != nil { // holds: returns without writing
			t.Fatal(err)
		}
	}
	publishAtPace(w, "pub1", 80*time.Millisecond) // a slow pace: nothing would join
	go w.flushSoon(true)
	readExactly(t, r, "pub1")

	held("pub2")
	time.Sleep(25 * time.Millisecond)
	held("pub3") // a pair: its third is due 50 ms after pub2
	nothingToRead(t, r, 25*time.Millisecond)
	pub("pub4")
	go w.flushSoon(true) // the next is due 75 ms after pub2: past the span
	readExactly(t, r, "pub2pub3pub4")

	held("pub5") // after a write of three: waits all the same
	nothingToRead(t, r, 25*time.Millisecond)
	go w.writeNow()
	readExactly(t, r, "pub5")
}

// A Flush that fails ends the session, and says why once: the error is the session's failure,
// not that failure wrapped in itself again.
func TestSessionFlushFailureIsReportedOnce(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	s := &Session{cfg: Config{WriteTimeout: 100 * time.Millisecond}, dead: make(chan struct{})}
	s.out = newCoalescer(writeBound{Conn: client, timeout: s.cfg.WriteTimeout}, s.writeFailed)
	s.out.holding(true)
	s.out.Write([]byte("pub1")) // nobody reads the pipe
	s.out.holding(false)
	err := s.Flush()
	if !errors.Is(err, ErrClosed) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Flush into a stalled pipe: %v, want ErrClosed and os.ErrDeadlineExceeded", err)
	}
	if err.Error() != s.Err().Error() {
		t.Errorf("Flush: %q; want the session's failure, %q", err, s.Err())
	}
}

// Writes from a publishing goroutine (holding around each) and from another goroutine (not
// holding), with the timer, writeNow and flushSoon all writing what is held, reach the socket
// complete and in the order the writes were made.
func TestCoalescerKeepsOrderUnderConcurrency(t *testing.T) {
	w, server := pipeCoalescer(t, 50*time.Microsecond, nil)

	var mu sync.Mutex // plays amqp091's sendM: the order writes are made in
	var want bytes.Buffer
	write := func(p string) {
		mu.Lock()
		defer mu.Unlock()
		want.WriteString(p)
		if _, err := w.Write([]byte(p)); err != nil {
			t.Errorf("Write: %v", err)
		}
	}
	got := make(chan []byte)
	go func() { b, _ := io.ReadAll(server); got <- b }()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 3000 {
			w.holding(true)
			write(fmt.Sprintf("<m%d>", i))
			write(fmt.Sprintf("<h%d>", i))
			w.holding(false)
			switch i % 3 {
			case 0:
				_ = w.writeNow()
			case 1:
				_ = w.flushSoon(true)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := range 300 {
			write(fmt.Sprintf("<b%d>", i))
			time.Sleep(20 * time.Microsecond)
		}
	}()
	wg.Wait()
	time.Sleep(20 * time.Millisecond) // the timer writes the rest
	w.Conn.Close()
	b := <-got
	if !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("socket got %d bytes, want %d, in write order", len(b), want.Len())
	}
}

// writtenAt tells when a publish's last frame went out: a large publish that the size bound
// wrote in part is written only when its tail is.
func TestCoalescerStampsLastFrame(t *testing.T) {
	w, r := pipeCoalescer(t, time.Hour, nil)
	go io.Copy(io.Discard, r)
	w.holdFor(1)
	w.Write([]byte("pub1"))
	w.holding(false)
	w.holdFor(2)
	w.Write(make([]byte, coalesceBytes)) // writes pub1 and the head of pub2
	afterHead := time.Now()
	w.Write([]byte("tail"))
	w.holding(false)
	time.Sleep(10 * time.Millisecond)
	beforeTail := time.Now()
	if err := w.writeNow(); err != nil {
		t.Fatal(err)
	}
	if got := w.writtenAt(1); got.IsZero() || got.After(afterHead) {
		t.Errorf("publish 1 written at %v, want by %v", got, afterHead)
	}
	if got := w.writtenAt(2); got.Before(beforeTail) {
		t.Errorf("publish 2 written at %v, want at the writeNow of its tail, after %v", got, beforeTail)
	}
	if got := w.writtenAt(3); !got.IsZero() {
		t.Errorf("publish 3, never made, written at %v", got)
	}
}
