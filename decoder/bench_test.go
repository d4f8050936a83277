package decoder_test

import (
	"strings"
	"testing"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/wire"
)

// benchPayload is a typical event of about 300 bytes, as jsonb prints it.
var benchPayload = `{"id": 918273, "sku": "WX-1029-BLK", "qty": 3, "lines": [` +
	`{"sku": "WX-1029-BLK", "qty": 2, "price": "19.99"}, {"sku": "AB-2231-RED", "qty": 1, "price": "5.49"}], ` +
	`"total": "45.47", "currency": "EUR", "customer": {"id": "c-55121", "tier": "gold"}, ` +
	`"placed_at": "2026-11-22T07:15:24.123456Z"}`

func BenchmarkDecodeInsert(b *testing.B) {
	benchmarkInsert(b, outboxCols, outboxRow(benchPayload))
}

// BenchmarkDecodeInsertTextPayload: a payload column of type text is validated as JSON.
func BenchmarkDecodeInsertTextPayload(b *testing.B) {
	cols := append([]col(nil), outboxCols...)
	cols[4].oid = oidText
	benchmarkInsert(b, cols, outboxRow(benchPayload))
}

// BenchmarkDecodeInsertHeaders: headers with a W3C traceparent take the fast path for objects
// of plain strings.
func BenchmarkDecodeInsertHeaders(b *testing.B) {
	benchmarkInsert(b, outboxCols, setCol(outboxRow(benchPayload), "headers",
		text(`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)))
}

// BenchmarkDecodeInsertHeadersJSON: headers with a non-string value go through encoding/json.
func BenchmarkDecodeInsertHeadersJSON(b *testing.B) {
	benchmarkInsert(b, outboxCols, setCol(outboxRow(benchPayload), "headers",
		text(`{"retries": 3, "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)))
}

// BenchmarkDecodeInsertMapped: a legacy table with a bigint id, a per-row exchange and a
// routing key template, read through a mapping.
func BenchmarkDecodeInsertMapped(b *testing.B) {
	benchmarkMapped(b, eventsMapping, eventsVals("body", text(benchPayload), "meta", text("{}")))
}

// BenchmarkDecodeInsertPositionID: a table without an id column; ids are derived from the
// position.
func BenchmarkDecodeInsertPositionID(b *testing.B) {
	benchmarkMapped(b, positionMapping, eventsVals("body", text(benchPayload), "meta", text("{}")))
}

func benchmarkMapped(b *testing.B, m wire.Mapping, row []val) {
	benchmarkDecoder(b, newMappedDecoder(b, m, eventsCols), insertMsg(eventsRelID, row...))
}

func benchmarkInsert(b *testing.B, cols []col, row []val) {
	benchmarkDecoder(b, newDecoder(b, cols), insertMsg(outboxRelID, row...))
}

func benchmarkDecoder(b *testing.B, d *decoder.Decoder, data []byte) {
	if n := len(benchPayload); n < 280 || n > 320 {
		b.Fatalf("payload of %d bytes, want about 300", n)
	}
	if _, err := d.Decode(testLSN, data); err != nil {
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

// BenchmarkDecodeTransaction decodes a transaction of 10 rows: Begin, Relation, 10 Inserts and
// Commit, as the server sends it to a new walsender. One op is one message.
func BenchmarkDecodeTransaction(b *testing.B) {
	frames := [][]byte{
		beginMsg(0x16B3800, commitTime, 771),
		relationMsg(outboxRelID, "public", "outbox", outboxCols),
	}
	for range 10 {
		frames = append(frames, insertMsg(outboxRelID, outboxRow(benchPayload)...))
	}
	frames = append(frames, commitMsg(0x16B3800, 0x16B3830, commitTime))
	d := decoder.New()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := d.Decode(testLSN, frames[i]); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(frames) {
			i = 0
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkDecodeLargePayload decodes a row with a 100 KB payload.
func BenchmarkDecodeLargePayload(b *testing.B) {
	payload := `{"data": "` + strings.Repeat("x", 100<<10) + `"}`
	d := newDecoder(b, outboxCols)
	data := insertMsg(outboxRelID, outboxRow(payload)...)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(testLSN, data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkDecodeEmittedMessage decodes the logical decoding message walbox_emit writes for the
// same row as BenchmarkDecodeInsertHeaders.
func BenchmarkDecodeEmittedMessage(b *testing.B) {
	content := `{"v" : 1, "id" : "0b2c6f2e-8a51-4b6e-9d7c-3f1e2a4b5c6d", "aggregate_type" : "order", ` +
		`"aggregate_id" : "42", "event_type" : "order.created", "payload" : ` + benchPayload + `, ` +
		`"headers" : {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, ` +
		`"created_at" : "2026-11-22T07:15:24.123456+00:00"}`
	data := []byte{'M', 1, 0, 0, 0, 0, 0, 0x16, 0xB3, 0x80}
	data = append(append(data, "walbox\x00"...), byte(len(content)>>24), byte(len(content)>>16), byte(len(content)>>8), byte(len(content)))
	data = append(data, content...)
	benchmarkDecoder(b, decoder.New().WithMessagePrefix(wire.DefaultMessagePrefix), data)
}
