package checkpoint_test

import (
	"math/rand/v2"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/checkpoint"
)

// ledger is the ledger the watermark tests use: no values, and a window they never fill.
type ledger = checkpoint.Ledger[struct{}]

func newLedger(start pglogrepl.LSN) *ledger { return checkpoint.NewLedger[struct{}](start, 1<<16) }

func mustDispatch(t *testing.T, tr *ledger, seq uint64) {
	t.Helper()
	if err := tr.Dispatch(seq, struct{}{}); err != nil {
		t.Fatal(err)
	}
}

func mustAck(t *testing.T, tr *ledger, seq uint64) {
	t.Helper()
	if _, err := tr.Ack(seq); err != nil {
		t.Fatal(err)
	}
}

func TestWatermark(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, tr *ledger)
		want pglogrepl.LSN
	}{
		{"starts at the slot position", func(*testing.T, *ledger) {}, 100},
		{"does not move before the commit is seen", func(t *testing.T, tr *ledger) {
			tr.Begin()
			mustDispatch(t, tr, 1)
			mustAck(t, tr, 1)
		}, 100},
		{"moves to the commit end once its messages are acked", func(t *testing.T, tr *ledger) {
			tr.Begin()
			mustDispatch(t, tr, 1)
			mustDispatch(t, tr, 2)
			tr.Commit(200)
			mustAck(t, tr, 1)
			mustAck(t, tr, 2)
		}, 200},
		{"does not move while one message of the transaction is unacked", func(t *testing.T, tr *ledger) {
			tr.Begin()
			mustDispatch(t, tr, 1)
			mustDispatch(t, tr, 2)
			tr.Commit(200)
			mustAck(t, tr, 2)
		}, 100},
		{"a later transaction acked first does not move it", func(t *testing.T, tr *ledger) {
			tr.Begin()
			mustDispatch(t, tr, 1)
			tr.Commit(200)
			tr.Begin()
			mustDispatch(t, tr, 2)
			tr.Commit(300)
			mustAck(t, tr, 2)
		}, 100},
		{"out of order acks close the gap", func(t *testing.T, tr *ledger) {
			tr.Begin()
			mustDispatch(t, tr, 1)
			tr.Commit(200)
			tr.Begin()
			mustDispatch(t, tr, 2)
			tr.Commit(300)
			mustAck(t, tr, 2)
			mustAck(t, tr, 1)
		}, 300},
		{"stops at the transaction before a nack", func(t *testing.T, tr *ledger) {
			tr.Begin()
			mustDispatch(t, tr, 1)
			tr.Commit(200)
			mustAck(t, tr, 1)
			tr.Begin()
			mustDispatch(t, tr, 2)
			mustDispatch(t, tr, 3)
			tr.Commit(300)
			tr.Nack(2)
			mustAck(t, tr, 3)
			tr.Begin()
			mustDispatch(t, tr, 4)
			tr.Commit(400)
			mustAck(t, tr, 4)
		}, 200},
		{"a transaction with no messages passes once earlier ones are acked", func(t *testing.T, tr *ledger) {
			tr.Begin()
			mustDispatch(t, tr, 1)
			tr.Commit(200)
			tr.Begin()
			tr.Commit(300)
			mustAck(t, tr, 1)
		}, 300},
		{"idle moves it when nothing is pending", func(t *testing.T, tr *ledger) {
			tr.Begin()
			mustDispatch(t, tr, 1)
			tr.Commit(200)
			mustAck(t, tr, 1)
			tr.AdvanceIdle(500)
		}, 500},
		{"idle does not move it with a message in flight", func(t *testing.T, tr *ledger) {
			tr.Begin()
			mustDispatch(t, tr, 1)
			tr.Commit(200)
			tr.AdvanceIdle(500)
		}, 100},
		{"idle does not move it inside an open transaction", func(t *testing.T, tr *ledger) {
			tr.Begin()
			tr.AdvanceIdle(500)
		}, 100},
		{"idle does not move it inside an open transaction whose messages are acked", func(t *testing.T, tr *ledger) {
			tr.Begin()
			mustDispatch(t, tr, 1)
			mustAck(t, tr, 1)
			tr.AdvanceIdle(500)
		}, 100},
		{"idle does not move it after a nack", func(t *testing.T, tr *ledger) {
			tr.Begin()
			mustDispatch(t, tr, 1)
			tr.Commit(200)
			tr.Nack(1)
			tr.AdvanceIdle(500)
		}, 100},
		{"never moves backwards", func(t *testing.T, tr *ledger) {
			tr.Begin()
			tr.Commit(50)
			tr.AdvanceIdle(90)
		}, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newLedger(100)
			tt.run(t, tr)
			if got := tr.Watermark(); got != tt.want {
				t.Errorf("watermark = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestRejectsBadSequences(t *testing.T) {
	tr := newLedger(0)
	if err := tr.Dispatch(2, struct{}{}); err == nil {
		t.Error("dispatch of 2 first: want error")
	}
	mustDispatch(t, tr, 1)
	if err := tr.Dispatch(1, struct{}{}); err == nil {
		t.Error("repeated dispatch: want error")
	}
	if _, err := tr.Ack(5); err == nil {
		t.Error("ack of an undispatched sequence: want error")
	}
	mustAck(t, tr, 1)
	if _, err := tr.Ack(1); err == nil {
		t.Error("repeated ack: want error")
	}
}

func TestInFlight(t *testing.T) {
	tr := newLedger(0)
	tr.Begin()
	for seq := uint64(1); seq <= 3; seq++ {
		mustDispatch(t, tr, seq)
	}
	mustAck(t, tr, 3)
	if got, want := tr.InFlight(), 2; got != want {
		t.Errorf("in flight = %d, want %d", got, want)
	}
	// The span counts the early ack of 3 too: it waits on the oldest, 1.
	if got, want := tr.Span(), 3; got != want {
		t.Errorf("span = %d, want %d", got, want)
	}
	mustAck(t, tr, 1)
	if got, want := tr.Span(), 2; got != want {
		t.Errorf("span after acking 1 = %d, want %d", got, want)
	}
}

// TestNeverPassesAnUnconfirmedMessage drives the ledger with random transactions, ack orders and nacks.
// After every step it compares the ledger with a brute-force model.
// The watermark must equal the end of the longest prefix of complete transactions, all acked.
// It must stop for good at the first nack.
func TestNeverPassesAnUnconfirmedMessage(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed*7+1))
		runRandom(t, seed, rng)
	}
}

type txn struct {
	first, last uint64 // sequences first..last; last < first when empty
	end         pglogrepl.LSN
	committed   bool
}

func runRandom(t *testing.T, seed uint64, rng *rand.Rand) {
	const start = pglogrepl.LSN(1000)
	tr := newLedger(start)
	var (
		txns     []*txn
		seq      uint64
		lsn      = start
		acked    = map[uint64]bool{}
		pending  []uint64
		nacked   = false
		frozenAt pglogrepl.LSN
	)
	model := func() pglogrepl.LSN {
		w := start
		for _, x := range txns {
			if !x.committed {
				break
			}
			ok := true
			for s := x.first; s <= x.last; s++ {
				if !acked[s] {
					ok = false
					break
				}
			}
			if !ok {
				break
			}
			w = x.end
		}
		return w
	}
	var open *txn
	for step := 0; step < 400; step++ {
		switch r := rng.IntN(10); {
		case r < 4 && open == nil:
			open = &txn{first: seq + 1, last: seq}
			txns = append(txns, open)
			tr.Begin()
		case r < 6 && open != nil:
			seq++
			open.last = seq
			if err := tr.Dispatch(seq, struct{}{}); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			pending = append(pending, seq)
		case r < 7 && open != nil:
			lsn += pglogrepl.LSN(1 + rng.IntN(100))
			open.end, open.committed = lsn, true
			tr.Commit(lsn)
			open = nil
		case len(pending) > 0:
			i := rng.IntN(len(pending))
			s := pending[i]
			pending = append(pending[:i], pending[i+1:]...)
			if rng.IntN(50) == 0 && !nacked {
				nacked = true
				frozenAt = tr.Watermark()
				tr.Nack(s)
				continue
			}
			acked[s] = true
			if _, err := tr.Ack(s); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		got, want := tr.Watermark(), model()
		if nacked {
			if got != frozenAt {
				t.Fatalf("seed %d step %d: watermark %v moved after a nack (frozen at %v)", seed, step, got, frozenAt)
			}
			continue
		}
		if got != want {
			t.Fatalf("seed %d step %d: watermark = %v, model says %v", seed, step, got, want)
		}
		if got, want := tr.InFlight(), len(pending); got != want {
			t.Fatalf("seed %d step %d: in flight = %d, want %d", seed, step, got, want)
		}
	}
}

func BenchmarkTracker(b *testing.B) {
	tr := newLedger(0)
	b.ReportAllocs()
	var lsn pglogrepl.LSN
	for i := range b.N {
		seq := uint64(i + 1)
		tr.Begin()
		if err := tr.Dispatch(seq, struct{}{}); err != nil {
			b.Fatal(err)
		}
		lsn += 100
		tr.Commit(lsn)
		if _, err := tr.Ack(seq); err != nil {
			b.Fatal(err)
		}
	}
}
