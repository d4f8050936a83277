package decoder_test

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

// The shapes of test/cmd/walbox-bench's scenarios that the other decoder benchmarks do not cover.

// BenchmarkDecodeSingleRowTransaction decodes Begin, Insert and Commit: one op is one row of a
// single-row transaction, the shape of the benchmark's main drain scenario, where the
// transaction's framing costs as much per row as the row itself.
func BenchmarkDecodeSingleRowTransaction(b *testing.B) {
	d := newDecoder(b, outboxCols)
	begin := beginMsg(0x16B3800, commitTime, 771)
	insert := insertMsg(outboxRelID, outboxRow(benchPayload)...)
	commit := commitMsg(0x16B3800, 0x16B3830, commitTime)
	b.ReportAllocs()
	for b.Loop() {
		for _, f := range [][]byte{begin, insert, commit} {
			if _, err := d.Decode(testLSN, f); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkDecodeInsert10KB decodes a row with the 10 KB payload of the benchmark's large-message
// scenarios.
func BenchmarkDecodeInsert10KB(b *testing.B) {
	payload := `{"pad": "` + strings.Repeat("x", 10<<10-12) + `"}`
	d := newDecoder(b, outboxCols)
	data := insertMsg(outboxRelID, outboxRow(payload)...)
	if _, err := d.Decode(pglogrepl.LSN(testLSN), data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(testLSN, data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
