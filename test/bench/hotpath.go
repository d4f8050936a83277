package bench

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walbox/walbox/checkpoint"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/publisher"
)

// HotPathResult is one in-process measurement of the relay's per-message work, on one core.
type HotPathResult struct {
	Name        string
	NsPerMsg    float64
	AllocsPerOp int64
	BytesPerOp  int64
	MsgsPerSec  float64
}

// HotPath measures, with testing.Benchmark, what walbox does per message besides I/O: decoding
// the pgoutput messages of a single-row transaction (Begin, Insert, Commit), building the AMQP
// message, and tracking its confirm; then all of it together. The rows are those of the drain
// scenarios: a 300-byte jsonb payload and a traceparent header.
func HotPath() ([]HotPathResult, error) {
	f := newFrames(payload(123456, time.Now().UnixNano(), 300))
	if err := f.check(); err != nil {
		return nil, err
	}
	cases := []struct {
		name string
		fn   func(b *testing.B)
	}{
		{"decode insert", f.benchDecodeInsert},
		{"decode 1-row transaction (B, I, C)", f.benchDecodeTx},
		{"build AMQP message", f.benchMessage},
		{"track confirm (checkpoint)", benchTracker},
		{"all of the above", f.benchAll},
	}
	var out []HotPathResult
	for _, c := range cases {
		r := testing.Benchmark(c.fn)
		ns := float64(r.T.Nanoseconds()) / float64(max(r.N, 1))
		out = append(out, HotPathResult{Name: c.name, NsPerMsg: ns, AllocsPerOp: r.AllocsPerOp(),
			BytesPerOp: r.AllocedBytesPerOp(), MsgsPerSec: 1e9 / ns})
	}
	return out, nil
}

// frames are the pgoutput messages of a single-row transaction into the default outbox table.
type frames struct {
	relation, begin, insert, commit []byte
}

const benchRelID = 16384

func newFrames(body string) *frames {
	cols := []struct {
		name string
		oid  uint32
	}{
		{"id", 2950}, {"aggregate_type", 25}, {"aggregate_id", 25}, {"event_type", 25},
		{"payload", 3802}, {"headers", 3802}, {"created_at", 1184},
	}
	rel := wire{'R'}.u32(benchRelID).str("public").str("outbox").u8('d').u16(uint16(len(cols)))
	for _, c := range cols {
		rel = rel.u8(0).str(c.name).u32(c.oid).u32(0xffffffff)
	}
	vals := []string{"0b2c6f2e-8a51-4b6e-9d7c-3f1e2a4b5c6d", "order", "42", "order.created", body, headersJSON,
		"2026-11-22 07:15:24.123456+00"}
	ins := wire{'I'}.u32(benchRelID).u8('N').u16(uint16(len(vals)))
	for _, v := range vals {
		ins = append(ins.u8('t').u32(uint32(len(v))), v...)
	}
	const at = uint64(0x16B3800)
	ts := uint64(time.Date(2026, 11, 22, 7, 15, 24, 0, time.UTC).UnixMicro() - 946684800*1000000)
	return &frames{
		relation: rel,
		begin:    wire{'B'}.u64(at).u64(ts).u32(771),
		insert:   ins,
		commit:   wire{'C'}.u8(0).u64(at).u64(at + 0x30).u64(ts),
	}
}

// wire builds a pgoutput message.
type wire []byte

func (m wire) u8(v byte) wire    { return append(m, v) }
func (m wire) u16(v uint16) wire { return binary.BigEndian.AppendUint16(m, v) }
func (m wire) u32(v uint32) wire { return binary.BigEndian.AppendUint32(m, v) }
func (m wire) u64(v uint64) wire { return binary.BigEndian.AppendUint64(m, v) }
func (m wire) str(s string) wire { return append(append(m, s...), 0) }

// decoder returns a decoder that has seen the relation.
func (f *frames) decoder() (*decoder.Decoder, error) {
	d := decoder.New()
	if _, err := d.Decode(0, f.relation); err != nil {
		return nil, fmt.Errorf("hot path: relation: %w", err)
	}
	return d, nil
}

// check decodes the frames once, so that the benchmarks measure success, not errors.
func (f *frames) check() error {
	d, err := f.decoder()
	if err != nil {
		return err
	}
	want := []decoder.Kind{decoder.KindBegin, decoder.KindRow, decoder.KindCommit}
	for i, fr := range [][]byte{f.begin, f.insert, f.commit} {
		ev, err := d.Decode(0, fr)
		if err != nil {
			return fmt.Errorf("hot path: %w", err)
		}
		if ev.Kind != want[i] {
			return fmt.Errorf("hot path: decoded a %s, want a %s", ev.Kind, want[i])
		}
	}
	return nil
}

func (f *frames) benchDecodeInsert(b *testing.B) {
	d, _ := f.decoder()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = d.Decode(0, f.insert)
	}
}

func (f *frames) benchDecodeTx(b *testing.B) {
	d, _ := f.decoder()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = d.Decode(0, f.begin)
		_, _ = d.Decode(0, f.insert)
		_, _ = d.Decode(0, f.commit)
	}
}

func (f *frames) benchMessage(b *testing.B) {
	d, _ := f.decoder()
	ev, _ := d.Decode(0, f.insert)
	b.ReportAllocs()
	for b.Loop() {
		_ = publisher.Publishing(&ev.Message, "walbox")
	}
}

func benchTracker(b *testing.B) {
	tr := checkpoint.NewLedger[struct{}](0, 1024)
	b.ReportAllocs()
	var seq uint64
	for b.Loop() {
		seq++
		tr.Begin()
		_ = tr.Dispatch(seq, struct{}{})
		tr.Commit(pglogrepl.LSN(seq * 100))
		_, _ = tr.Ack(seq)
	}
}

func (f *frames) benchAll(b *testing.B) {
	d, _ := f.decoder()
	tr := checkpoint.NewLedger[struct{}](0, 1024)
	b.ReportAllocs()
	var seq uint64
	for b.Loop() {
		seq++
		_, _ = d.Decode(0, f.begin)
		tr.Begin()
		ev, _ := d.Decode(0, f.insert)
		_ = publisher.Publishing(&ev.Message, "walbox")
		_ = tr.Dispatch(seq, struct{}{})
		c, _ := d.Decode(0, f.commit)
		tr.Commit(c.EndLSN + pglogrepl.LSN(seq*100))
		_, _ = tr.Ack(seq)
	}
}
