package decoder_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/wire"
)

// A fuzz input is a sequence of frames, each a uvarint length and that many bytes; a length
// past the end takes the rest.

func joinFrames(frames [][]byte) []byte {
	var b []byte
	for _, f := range frames {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

func splitFrames(b []byte) [][]byte {
	var frames [][]byte
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return append(frames, b)
		}
		b = b[k:]
		n = min(n, uint64(len(b)))
		frames = append(frames, b[:n])
		b = b[n:]
	}
	return frames
}

// maxSeedFrame keeps the seeds small: larger frames are left out of them.
const maxSeedFrame = 2048

func FuzzDecode(f *testing.F) {
	for _, c := range goldenCases {
		frames, err := readFrames(filepath.Join("testdata", c.name))
		if err != nil {
			f.Fatal(err)
		}
		var seed [][]byte
		for _, fr := range frames {
			if len(fr.data) <= maxSeedFrame {
				seed = append(seed, fr.data)
			}
		}
		f.Add(joinFrames(seed))
	}
	relation := validMessages()["relation"]
	for _, m := range validMessages() {
		f.Add(joinFrames([][]byte{relation, m}))
	}
	events := relationMsg(eventsRelID, "public", "events", eventsCols)
	f.Add(joinFrames([][]byte{events, insertMsg(eventsRelID, eventsRow()...)}))
	f.Add(joinFrames([][]byte{events, insertMsg(eventsRelID, eventsVals("entity", null, "target_exchange", text(""))...)}))

	maps := fuzzMappings(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		d := decoder.New(maps...).WithMessagePrefix(wire.DefaultMessagePrefix)
		for i, frame := range splitFrames(in) {
			checkDecode(t, d, pglogrepl.LSN(i+1), bytes.Clone(frame))
		}
	})
}

// fuzzMappings are the mappings of every golden case (the first for a table wins), the default
// table, and a table of the default shape in another schema.
func fuzzMappings(f *testing.F) []wire.Mapping {
	maps := []wire.Mapping{wire.Mapping{Table: wire.DefaultTable}.WithDefaults(),
		wire.Mapping{Table: wire.Table{Schema: "app", Name: "events"}}.WithDefaults()}
	for _, c := range goldenCases {
		m, err := readMappings(filepath.Join("testdata", c.name))
		if err != nil {
			f.Fatal(err)
		}
		maps = append(maps, m...)
	}
	return maps
}

// checkDecode decodes one frame and checks the contract: no panic, every error an *Error that
// carries the LSN and wraps a sentinel, and rows that share no memory with the input.
func checkDecode(t *testing.T, d *decoder.Decoder, lsn pglogrepl.LSN, data []byte) {
	ev, err := d.Decode(lsn, data)
	if err != nil {
		e, ok := err.(*decoder.Error)
		if !ok {
			t.Fatalf("error %v is a %T, want *decoder.Error", err, err)
		}
		if e.LSN != lsn || e.Err == nil {
			t.Fatalf("error %v: LSN %v, Err %v; want LSN %v and an Err", err, e.LSN, e.Err, lsn)
		}
		if !isSentinel(err) {
			t.Fatalf("error %v wraps no sentinel", err)
		}
		_ = e.Error()
		return
	}
	if ev.Kind != decoder.KindRow {
		return
	}
	m := ev.Message
	if m.EventType == "" || m.Payload == nil || m.AMQPMessageID() == "" {
		t.Fatalf("row without event type, payload or id: %+v", m)
	}
	if len(m.RoutingKey) > 255 || len(m.MessageID) > 255 || len(m.Exchange) > 255 {
		t.Fatalf("row with a routing key, message id or exchange over 255 bytes: %+v", m)
	}
	payload := bytes.Clone(m.Payload)
	for i := range data {
		data[i] ^= 0xff
	}
	if !bytes.Equal(payload, m.Payload) {
		t.Fatalf("the payload shares memory with the input")
	}
}

func isSentinel(err error) bool {
	for _, s := range []error{decoder.ErrMalformed, decoder.ErrBadRow, decoder.ErrForeignTable, decoder.ErrSchemaDrift, decoder.ErrStreaming} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
