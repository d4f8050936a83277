package replication

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// The pgconn package closes a connection whose read fails from a goroutine of its own.
// That goroutine writes a Terminate message through the connection's write buffer.
// The reporter may be sending a status update at that moment.
// Its check of the reader's failure comes before the reader records it.
// The status update must not touch pgconn's write buffer.
// Otherwise the two race (go test -race reports it), and the Terminate may go out twice.
func TestStatusUpdateWhileTheConnectionClosesItself(t *testing.T) {
	for range 20 {
		sendWhileClosing(t)
	}
}

func sendWhileClosing(t *testing.T) {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	cfg, err := pgconn.ParseConfig("postgres://walbox@127.0.0.1:1/walbox")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) {
		time.Sleep(time.Millisecond) // the cancel request's connection, refused
		return nil, errors.New("refused")
	}
	conn, err := pgconn.Construct(&pgconn.HijackedConn{Conn: client, Config: cfg, ParameterStatuses: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	// The server's side reads everything, and says when a Terminate has arrived.
	written, terminated := make(chan []byte), make(chan struct{})
	go func() {
		var b []byte
		buf := make([]byte, 512)
		for seen := false; ; {
			n, err := server.Read(buf)
			b = append(b, buf[:n]...)
			if !seen && bytes.Contains(b, []byte{'X', 0, 0, 0, 4}) {
				seen = true
				close(terminated)
			}
			if err != nil {
				written <- b
				return
			}
		}
	}()
	rd := startReader(conn, "s", newHeardClock(), func(error) {})
	rep := newReporter(reporterParts{cfg: &Config{StatusInterval: time.Hour, Slot: "s"}, send: socketSender(conn)})
	// A message pgproto3 does not know: the read fails, and pgconn closes the connection.
	if _, err := server.Write([]byte{'!', 0, 0, 0, 4}); err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(20 * time.Millisecond)
	for time.Now().Before(stop) {
		_ = rep.send(pglogrepl.StandbyStatusUpdate{WALWritePosition: 1, WALFlushPosition: 1, WALApplyPosition: 1})
	}
	<-rd.failed
	<-rd.done
	select { // pgconn's close writes its Terminate from a goroutine of its own
	case <-terminated:
	case <-time.After(10 * time.Second):
		t.Fatal("no Terminate within 10 s of the read failing")
	}
	time.Sleep(10 * time.Millisecond) // room for a second Terminate, which must not come
	server.Close()
	terminates := 0
	for b := <-written; len(b) > 0; {
		if len(b) < 5 {
			t.Fatalf("%d bytes left over, not a message", len(b))
		}
		n := int(binary.BigEndian.Uint32(b[1:5])) + 1
		switch {
		case b[0] == 'X' && n == 5:
			terminates++
		case b[0] == 'd' && n == 39 && b[5] == 'r':
		default:
			t.Fatalf("message %q of %d bytes: not a status update or a Terminate", b[0], n)
		}
		b = b[n:]
	}
	if terminates != 1 {
		t.Fatalf("%d Terminate messages written, want 1", terminates)
	}
}

// sendStatus writes what pglogrepl.SendStandbyStatusUpdate writes.
func TestSendStatusWritesWhatPglogreplWrites(t *testing.T) {
	u := pglogrepl.StandbyStatusUpdate{WALWritePosition: 0x1_0000_00AB, WALFlushPosition: 0x1_0000_00AA,
		WALApplyPosition: 0x1_0000_00A9, ClientTime: time.Date(2026, 11, 26, 7, 0, 0, 123456789, time.UTC), ReplyRequested: true}
	want := written(t, func(c net.Conn) error {
		cfg, err := pgconn.ParseConfig("postgres://walbox@127.0.0.1:1/walbox")
		if err != nil {
			return err
		}
		conn, err := pgconn.Construct(&pgconn.HijackedConn{Conn: c, Config: cfg, ParameterStatuses: map[string]string{}})
		if err != nil {
			return err
		}
		return pglogrepl.SendStandbyStatusUpdate(context.Background(), conn, u)
	})
	got := written(t, func(c net.Conn) error { return sendStatus(c, u) })
	if !bytes.Equal(got, want) {
		t.Fatalf("sendStatus wrote %x, want %x", got, want)
	}
}

// written returns the bytes write writes to a connection.
func written(t *testing.T, write func(net.Conn) error) []byte {
	t.Helper()
	client, server := net.Pipe()
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(server)
		done <- b
	}()
	if err := write(client); err != nil {
		t.Fatal(err)
	}
	client.Close()
	return <-done
}
