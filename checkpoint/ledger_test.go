package checkpoint_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/walbox/walbox/checkpoint"
)

func TestWindowIsFullAtItsLimit(t *testing.T) {
	l := checkpoint.NewLedger[string](0, 3)
	l.Begin()
	for seq, v := range []string{"", "a", "b", "c"} {
		if seq == 0 {
			continue
		}
		if l.Full() {
			t.Fatalf("full after %d of 3", seq-1)
		}
		if err := l.Dispatch(uint64(seq), v); err != nil {
			t.Fatal(err)
		}
	}
	if !l.Full() {
		t.Fatal("not full with 3 of 3 in flight")
	}
	if err := l.Dispatch(4, "d"); !errors.Is(err, checkpoint.ErrFull) {
		t.Fatalf("dispatch past the window: %v, want ErrFull", err)
	}
	// An ack ahead of the oldest frees nothing: the window counts from the oldest unconfirmed.
	if v, err := l.Ack(2); err != nil || v != "b" {
		t.Fatalf("ack 2 = %q, %v; want b", v, err)
	}
	if !l.Full() {
		t.Fatal("an early ack made room")
	}
	if v, err := l.Ack(1); err != nil || v != "a" {
		t.Fatalf("ack 1 = %q, %v; want a", v, err)
	}
	if l.Full() {
		t.Fatal("still full once the oldest two are acked")
	}
	// The refused dispatch recorded nothing: 4 is still the next sequence.
	if err := l.Dispatch(4, "d"); err != nil {
		t.Fatal(err)
	}
	if v, ok := l.Oldest(); !ok || v != "c" {
		t.Fatalf("oldest = %q, %v; want c", v, ok)
	}
	if seq, v, ok := l.Newest(); !ok || seq != 4 || v != "d" {
		t.Fatalf("newest = %d %q %v; want 4 d", seq, v, ok)
	}
}

func TestLimitNarrowsAndWidensTheWindow(t *testing.T) {
	l := checkpoint.NewLedger[int](0, 4)
	l.SetLimit(1)
	l.Begin()
	if err := l.Dispatch(1, 1); err != nil {
		t.Fatal(err)
	}
	if err := l.Dispatch(2, 2); !errors.Is(err, checkpoint.ErrFull) {
		t.Fatalf("second message with a limit of one: %v, want ErrFull", err)
	}
	l.SetLimit(100) // no wider than the ledger's size
	for seq := uint64(2); seq <= 4; seq++ {
		if err := l.Dispatch(seq, int(seq)); err != nil {
			t.Fatal(err)
		}
	}
	if !l.Full() {
		t.Fatal("not full at the ledger's size")
	}
	l.SetLimit(0) // one message at least
	for seq := uint64(1); seq <= 4; seq++ {
		if _, err := l.Ack(seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Dispatch(5, 5); err != nil {
		t.Fatal(err)
	}
	if err := l.Dispatch(6, 6); !errors.Is(err, checkpoint.ErrFull) {
		t.Fatalf("second message with a limit of zero: %v, want ErrFull", err)
	}
}

func TestNackReturnsTheValueAndFreezes(t *testing.T) {
	l := checkpoint.NewLedger[string](100, 4)
	l.Begin()
	if err := l.Dispatch(1, "a"); err != nil {
		t.Fatal(err)
	}
	l.Commit(200)
	if got := l.Nack(1); got != "a" {
		t.Fatalf("nack 1 = %q, want a", got)
	}
	if got := l.Nack(0); got != "" {
		t.Fatalf("nack of the session's end = %q, want nothing", got)
	}
	if _, ok := l.Oldest(); !ok {
		t.Fatal("the nacked message is no longer in flight")
	}
	if got := l.Watermark(); got != 100 {
		t.Fatalf("watermark = %d, want 100", got)
	}
}

// TestWindowNeverPassesItsLimit dispatches while the window has room, and acks at random, in any order.
// What lies from the oldest unacked message to the newest never exceeds the limit.
// Every verdict returns the value dispatched with its sequence.
func TestWindowNeverPassesItsLimit(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		size := 1 + rng.IntN(8)
		l := checkpoint.NewLedger[uint64](0, size)
		var seq uint64
		var pending []uint64
		l.Begin()
		for step := 0; step < 500; step++ {
			if rng.IntN(2) == 0 && !l.Full() {
				seq++
				if err := l.Dispatch(seq, seq*10); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				pending = append(pending, seq)
			} else if len(pending) > 0 {
				i := rng.IntN(len(pending))
				s := pending[i]
				pending = append(pending[:i], pending[i+1:]...)
				v, err := l.Ack(s)
				if err != nil || v != s*10 {
					t.Fatalf("seed %d: ack %d = %d, %v; want %d", seed, s, v, err, s*10)
				}
			}
			if l.Span() > size {
				t.Fatalf("seed %d step %d: span %d over the limit %d", seed, step, l.Span(), size)
			}
			if got, want := l.InFlight(), len(pending); got != want {
				t.Fatalf("seed %d step %d: in flight = %d, want %d", seed, step, got, want)
			}
		}
	}
}

// Passed counts the messages below the watermark: those of transactions whose end it reached.
// It does not count those confirmed in a transaction still open, or waiting on an older message.
func TestPassedCountsOnlyMessagesBelowTheWatermark(t *testing.T) {
	l := checkpoint.NewLedger[string](0, 8)
	step := func(what string, do func(), watermark, passed uint64) {
		t.Helper()
		do()
		if uint64(l.Watermark()) != watermark || l.Passed() != passed {
			t.Fatalf("after %s: watermark %d, passed %d; want %d, %d", what, l.Watermark(), l.Passed(), watermark, passed)
		}
	}
	dispatch := func(seq uint64) {
		if err := l.Dispatch(seq, ""); err != nil {
			t.Fatal(err)
		}
	}
	ack := func(seq uint64) {
		if _, err := l.Ack(seq); err != nil {
			t.Fatal(err)
		}
	}
	step("T0's two messages", func() { l.Begin(); dispatch(1); dispatch(2); l.Commit(100) }, 0, 0)
	step("T1's first message", func() { l.Begin(); dispatch(3) }, 0, 0)
	step("an early ack of T1's message", func() { ack(3) }, 0, 0)
	step("the acks of T0's", func() { ack(1); ack(2) }, 100, 2)
	step("T1's commit", func() { l.Commit(200) }, 200, 3)
	step("an empty transaction", func() { l.Begin(); l.Commit(300) }, 300, 3)
	step("a keepalive", func() { l.AdvanceIdle(400) }, 400, 3)
}
