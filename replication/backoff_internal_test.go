package replication

import (
	"context"
	"errors"
	"fmt"
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
