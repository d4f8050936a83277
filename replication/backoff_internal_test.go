package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// After a failed connection to PostgreSQL the relay asks again within maxReconnect, however long
// the outage. Other errors back off up to the configured maximum.
func TestReconnectWaitIsCappedWhileTheServerIsDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = pgconn.Connect(context.Background(), "postgres://walbox@"+addr+"/db?connect_timeout=5")
	if err == nil {
		t.Fatal("connected to a closed port")
	}
	refused := fmt.Errorf("connect: %w", err) // as the session returns it
	if !unreached(refused) {
		t.Fatalf("a refused connection is not unreached: %v", refused)
	}
	b, other := newBackoff(30*time.Second), newBackoff(30*time.Second)
	var longest, otherLongest time.Duration
	for range 20 {
		longest = max(longest, b.after(refused, false))
		otherLongest = max(otherLongest, other.after(errors.New("publish: channel closed"), false))
	}
	if longest > maxReconnect {
		t.Errorf("waited %s between connections to a down server, want at most %s", longest, maxReconnect)
	}
	if otherLongest <= maxReconnect {
		t.Errorf("other errors waited at most %s, want the backoff to grow past %s", otherLongest, maxReconnect)
	}
}

// answering is a server that answers every connection with an error of the SQLSTATE code.
func answering(t *testing.T, code string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var n [4]byte
				if _, err := io.ReadFull(c, n[:]); err != nil {
					return
				}
				if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(n[:]))-4); err != nil {
					return
				}
				body := "SFATAL\x00VFATAL\x00C" + code + "\x00Mrefused by the test\x00\x00"
				msg := append([]byte{'E', 0, 0, 0, 0}, body...)
				binary.BigEndian.PutUint32(msg[1:], uint32(4+len(body)))
				_, _ = c.Write(msg)
			}()
		}
	}()
	return l.Addr().String()
}

// A server that refuses the login, or has no connection left, is asked again with the backoff,
// not every second. A server starting up is asked again within maxReconnect.
func TestReconnectWaitIsCappedOnlyWhileTheServerIsNotReady(t *testing.T) {
	for code, capped := range map[string]bool{"28P01": false, "53300": false, "57P03": true} {
		_, err := pgconn.Connect(context.Background(), "postgres://walbox@"+answering(t, code)+"/db?sslmode=disable&connect_timeout=5")
		if err == nil {
			t.Fatalf("%s: connected", code)
		}
		err = fmt.Errorf("connect: %w", err)
		b := newBackoff(30 * time.Second)
		var longest time.Duration
		for range 20 {
			longest = max(longest, b.after(err, false))
		}
		if capped && longest > maxReconnect {
			t.Errorf("%s: waited up to %s between connections, want at most %s: %v", code, longest, maxReconnect, err)
		}
		if !capped && longest <= maxReconnect {
			t.Errorf("%s: waited at most %s between connections, want the backoff to grow past %s: %v", code, longest, maxReconnect, err)
		}
	}
}

// The same connect error is logged once a minute, not at each retry; another error is logged at once.
func TestRepeatedConnectErrorsAreLoggedOnce(t *testing.T) {
	var q repeats
	refused, down := errors.New("connection refused"), errors.New("the database system is starting up")
	for i, c := range []struct {
		err  error
		want bool
	}{{refused, true}, {refused, false}, {down, true}, {refused, true}, {refused, false}} {
		if got := q.say(c.err); got != c.want {
			t.Errorf("error %d (%v): logged %v, want %v", i, c.err, got, c.want)
		}
	}
	q.at = q.at.Add(-time.Minute)
	if !q.say(refused) {
		t.Error("the same error a minute later was not logged")
	}
}
