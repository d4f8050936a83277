package publisher_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"

	"github.com/walbox/walbox/checkpoint"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

// A basic.nack that comes before the acks of earlier delivery tags stays a nack when a multiple
// ack then covers it. amqp091's confirmation stream reports such a tag as acked (it waits to be
// re-sequenced and the multiple ack passes over it); the session must report it nacked, and a
// watermark moved by its Confirms must never pass it. A fake broker on loopback sends, after
// three publishes, basic.nack 2 and then basic.ack 3 multiple, which a real broker does only now
// and then.
func TestNackBeforeEarlierAcks(t *testing.T) {
	t.Run("session", func(t *testing.T) { testNackBeforeEarlierAcks(t, false) })
	t.Run("lanes", func(t *testing.T) { testNackBeforeEarlierAcks(t, true) })
}

// confirmer is what Session and Lanes have in common.
type confirmer interface {
	Publish(context.Context, *wire.Message) (uint64, error)
	Flush() error
	Confirms() <-chan wire.Confirm
	Close() error
}

func testNackBeforeEarlierAcks(t *testing.T, lanes bool) {
	cfg := publisher.Config{URL: nackFirstBroker(t), Window: 8, DialTimeout: waitFor, CloseTimeout: 2 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	dial := func(ctx context.Context) (*publisher.Session, error) { return publisher.Dial(ctx, cfg) }
	var p confirmer
	var err error
	if lanes {
		p, err = publisher.DialLanes(ctx, 1, dial)
	} else {
		p, err = dial(ctx)
	}
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { p.Close() })

	// One transaction per message, committed at LSN 100, 200, 300.
	ledger := checkpoint.NewLedger[int](0, 8)
	const first = pglogrepl.LSN(100)
	for i := 1; i <= 3; i++ {
		ledger.Begin()
		m := &wire.Message{ID: uuid.New(), AggregateType: "order", AggregateID: "42",
			EventType: "order.created", Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
		seq, err := p.Publish(ctx, m)
		if err != nil || seq != uint64(i) {
			t.Fatalf("Publish %d: seq %d, %v", i, seq, err)
		}
		if err := ledger.Dispatch(seq, i); err != nil {
			t.Fatal(err)
		}
		ledger.Commit(pglogrepl.LSN(100 * i))
	}
	if err := p.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}

	for want := uint64(1); want <= 3; want++ {
		var c wire.Confirm
		select {
		case got, ok := <-p.Confirms():
			if !ok {
				t.Fatalf("Confirms closed before the verdict on message %d", want)
			}
			c = got
		case <-time.After(waitFor):
			t.Fatalf("no verdict on message %d within %v", want, waitFor)
		}
		if c.Seq != want {
			t.Fatalf("Confirm for seq %d (err %v); want seq %d", c.Seq, c.Err, want)
		}
		switch {
		case want == 2 && !errors.Is(c.Err, publisher.ErrNacked):
			t.Errorf("message 2, nacked by the broker: Confirm error %v; want ErrNacked", c.Err)
		case want != 2 && c.Err != nil:
			t.Errorf("message %d, acked by the broker: Confirm error %v; want nil", want, c.Err)
		}
		if c.Err == nil {
			if _, err := ledger.Ack(c.Seq); err != nil {
				t.Fatal(err)
			}
		} else {
			ledger.Nack(c.Seq)
		}
		if w := ledger.Watermark(); w > first {
			t.Errorf("after the verdict on message %d the watermark is %v, past message 1's commit %v", want, w, first)
		}
	}
	if w := ledger.Watermark(); w != first {
		t.Errorf("watermark %v; want %v, message 1's commit", w, first)
	}

	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for {
		select {
		case c, ok := <-p.Confirms():
			if !ok {
				return
			}
			if c.Seq != 0 {
				t.Errorf("a second verdict on message %d: %v", c.Seq, c.Err)
			}
		case <-time.After(waitFor):
			t.Fatalf("Confirms not closed within %v of Close", waitFor)
		}
	}
}

// nackFirstBroker serves one AMQP 0-9-1 connection on loopback and returns its URL. It answers
// the handshake and the session's channel setup; once it has read three whole publishes it
// sends basic.nack of tag 2, then basic.ack of tag 3 with multiple set. It answers
// connection.close and channel.close, and fails the test on any other method, or if the client
// goes without connection.close.
func nackFirstBroker(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serveNackFirst(t, ln) }()
	t.Cleanup(func() {
		ln.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("fake broker: %v", err)
			}
		case <-time.After(waitFor):
			t.Errorf("fake broker still running %v after the test", waitFor)
		}
	})
	return "amqp://guest:guest@" + ln.Addr().String() + "/"
}

func serveNackFirst(t *testing.T, ln net.Listener) error {
	c, err := ln.Accept()
	ln.Close()
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(waitFor)); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	hdr := make([]byte, 8)
	if _, err := io.ReadFull(r, hdr); err != nil || string(hdr) != "AMQP\x00\x00\x09\x01" {
		return fmt.Errorf("protocol header %q: %v", hdr, err)
	}
	var out bytes.Buffer
	send := func(ch uint16, class, id uint16, args ...[]byte) {
		p := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, class), id)
		for _, a := range args {
			p = append(p, a...)
		}
		h := binary.BigEndian.AppendUint16([]byte{1}, ch)
		out.Write(append(append(binary.BigEndian.AppendUint32(h, uint32(len(p))), p...), 0xCE))
	}
	flush := func() error { _, err := c.Write(out.Bytes()); out.Reset(); return err }
	u16 := func(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
	u32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	longstr := func(s string) []byte { return append(u32(uint32(len(s))), s...) }
	shortstr := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	// connection.start: version 0-9, no server properties, mechanisms, locales.
	send(0, 10, 10, []byte{0, 9}, u32(0), longstr("PLAIN"), longstr("en_US"))
	if err := flush(); err != nil {
		return err
	}

	var published int
	var body uint64 // bytes of the current publish's body still to come
	frame := make([]byte, 7)
	for {
		if _, err := io.ReadFull(r, frame); err != nil {
			return fmt.Errorf("after %d publishes, without connection.close: %w", published, err)
		}
		typ, ch, size := frame[0], binary.BigEndian.Uint16(frame[1:]), binary.BigEndian.Uint32(frame[3:])
		p := make([]byte, size+1)
		if _, err := io.ReadFull(r, p); err != nil || p[size] != 0xCE {
			return fmt.Errorf("frame of type %d: %v (end %#x)", typ, err, p[size])
		}
		p = p[:size]
		complete := false
		switch typ {
		case 1: // method
		case 2: // content header: class, weight, body size, properties
			body = binary.BigEndian.Uint64(p[4:])
			complete = body == 0
		case 3: // body
			body -= uint64(len(p))
			complete = body == 0
		case 8: // heartbeat
		default:
			return fmt.Errorf("frame type %d", typ)
		}
		if complete {
			if published++; published == 3 {
				send(1, 60, 120, binary.BigEndian.AppendUint64(nil, 2), []byte{0}) // basic.nack 2
				send(1, 60, 80, binary.BigEndian.AppendUint64(nil, 3), []byte{1})  // basic.ack 3 multiple
			}
		}
		if typ == 1 {
			class, id := binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:])
			t.Logf("fake broker: channel %d method %d.%d", ch, class, id)
			switch binary.BigEndian.Uint32(p) { // class<<16 | method
			case 10<<16 | 11: // connection.start-ok → tune: channel-max, frame-max, no heartbeat
				send(0, 10, 30, u16(0), u32(128<<10), u16(0))
			case 10<<16 | 31: // connection.tune-ok
			case 10<<16 | 40: // connection.open
				send(0, 10, 41, shortstr(""))
			case 20<<16 | 10: // channel.open
				send(ch, 20, 11, longstr(""))
			case 85<<16 | 10: // confirm.select
				send(ch, 85, 11)
			case 40<<16 | 10: // exchange.declare
				send(ch, 40, 11)
			case 50<<16 | 10: // queue.declare: reserved short, queue shortstr
				send(ch, 50, 11, p[6:7+p[6]], u32(0), u32(0))
			case 50<<16 | 20: // queue.bind
				send(ch, 50, 21)
			case 60<<16 | 40: // basic.publish: content frames follow
			case 20<<16 | 40: // channel.close
				send(ch, 20, 41)
			case 10<<16 | 50: // connection.close
				send(0, 10, 51)
				return flush()
			default:
				return fmt.Errorf("unexpected method %d.%d on channel %d", class, id, ch)
			}
		}
		if err := flush(); err != nil {
			return err
		}
	}
}
