package publisher_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

func TestParseURLs(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
		wantErr  string
	}{
		{"one", "amqp://u:p@h1:5672/", []string{"amqp://u:p@h1:5672/"}, ""},
		{"several, spaces trimmed", "amqp://u:p@h1:5672/, amqps://u:p@h2:5671/vh ,amqp://h3",
			[]string{"amqp://u:p@h1:5672/", "amqps://u:p@h2:5671/vh", "amqp://h3"}, ""},
		{"a comma inside a password", "amqp://u:a,b@h1/,amqp://u:a,b@h2/", []string{"amqp://u:a,b@h1/", "amqp://u:a,b@h2/"}, ""},
		{"empty", "", nil, "url: empty"},
		{"a bad one is named by its place", "amqp://u:p@h1/,amqp://u:secret-pw@h2:notaport/", nil, "url 2 of 2"},
		{"empty elements and a trailing comma are dropped", "amqp://h1/,, amqp://h2/,", []string{"amqp://h1/", "amqp://h2/"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := publisher.ParseURLs(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseURLs(%q) = %q, %v; want an error with %q", tt.in, got, err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "secret-pw") {
					t.Errorf("error shows the password: %v", err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("ParseURLs(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

// deadURL is an amqp URL with a password, for a port nothing listens on.
func deadURL(t *testing.T, password string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "amqp://guest:" + password + "@" + addr + "/"
}

// The same node under two host names stands in for two nodes: Endpoint tells them apart.
func TestEndpointsRotate(t *testing.T) {
	r := testenv.SharedRabbit(t)
	testenv.RequireOwn(t, r) // localhost is the node's second name only when the node is local
	u, err := url.Parse(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	nodeA := r.URL()
	u.Host = "localhost:" + u.Port()
	nodeB := u.String()
	dead := deadURL(t, "dead-node-pw")
	eps, err := publisher.NewEndpoints(publisher.Config{Exchange: testenv.UniqueName("outbox")},
		[]string{dead, nodeA, nodeB})
	if err != nil {
		t.Fatal(err)
	}
	hosts := eps.Hosts()
	ctx := context.Background()
	// The first Dial skips the dead node; each later one starts after the previous session's node,
	// and the dead node is skipped again on the way round.
	for i, want := range []string{hosts[1], hosts[2], hosts[1], hosts[2]} {
		s, err := eps.Dial(ctx)
		if err != nil {
			t.Fatalf("Dial %d: %v", i+1, err)
		}
		if got := s.Endpoint(); got != want {
			t.Errorf("Dial %d connected to %s, want %s", i+1, got, want)
		}
		if got := eps.Connected(); got != want {
			t.Errorf("Connected() = %q after Dial %d, want %q", got, i+1, want)
		}
		s.Close()
		if got := eps.Connected(); got != "" {
			t.Errorf("Connected() = %q after Close, want \"\"", got)
		}
	}
}

// When no endpoint answers, the error names every host and no password, and the next round
// starts at the same place.
func TestEndpointsAllDown(t *testing.T) {
	urls := []string{deadURL(t, "first-secret"), deadURL(t, "second-secret"), deadURL(t, "third-secret")}
	eps, err := publisher.NewEndpoints(publisher.Config{}, urls)
	if err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 2; round++ {
		_, err := eps.Dial(context.Background())
		if err == nil {
			t.Fatal("Dial succeeded with every broker down")
		}
		if errors.Is(err, wire.ErrServerAnswered) {
			t.Errorf("round %d: no broker answered, yet the error says one did: %v", round, err)
		}
		msg := err.Error()
		for i, h := range eps.Hosts() {
			if !strings.Contains(msg, h) {
				t.Errorf("round %d: error does not name %s: %v", round, h, err)
			}
			if i > 0 && strings.Index(msg, h) < strings.Index(msg, eps.Hosts()[i-1]) {
				t.Errorf("round %d: hosts out of list order: %v", round, err)
			}
		}
		for _, pw := range []string{"first-secret", "second-secret", "third-secret"} {
			if strings.Contains(msg, pw) {
				t.Errorf("round %d: error shows password %s: %v", round, pw, err)
			}
		}
	}
}

// A wrong password on a live node: the refusal names the node, not the password.
func TestEndpointsRedactRefusal(t *testing.T) {
	r := testenv.SharedRabbit(t)
	testenv.RequireOwn(t, r)
	u, _ := url.Parse(r.URL())
	u.User = url.UserPassword("guest", "wrong-pw-1234")
	eps, err := publisher.NewEndpoints(publisher.Config{}, []string{deadURL(t, "other-pw-5678"), u.String()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = eps.Dial(context.Background())
	if err == nil {
		t.Fatal("Dial succeeded with a wrong password")
	}
	if msg := err.Error(); strings.Contains(msg, "wrong-pw-1234") || strings.Contains(msg, "other-pw-5678") {
		t.Errorf("error shows a password: %v", err)
	}
	if !errors.Is(err, wire.ErrServerAnswered) {
		t.Errorf("one broker answered with a refusal, yet the error does not say so: %v", err)
	}
}

func TestNewEndpointsChecksEveryURL(t *testing.T) {
	_, err := publisher.NewEndpoints(publisher.Config{}, []string{"amqp://h1/", "ftp://u:pw-in-bad-url@h2/"})
	if err == nil || !strings.Contains(err.Error(), "url 2 of 2") || strings.Contains(err.Error(), "pw-in-bad-url") {
		t.Errorf("NewEndpoints with a bad second URL: %v", err)
	}
	if _, err := publisher.NewEndpoints(publisher.Config{}, nil); err == nil {
		t.Error("NewEndpoints with no URL: want an error")
	}
}

// With QueueType quorum the park and alternate queues are quorum queues, which stay available on
// a cluster while any one node is down.
func TestQuorumSinkQueues(t *testing.T) {
	r := testenv.SharedRabbit(t)
	_, exchange := dial(t, r.URL(), publisher.Config{QueueType: "quorum"})
	ch := admin(t, r.URL())
	for _, q := range []string{exchange + ".parked", exchange + ".unroutable"} {
		// A passive declare does not compare arguments: declare again with the type to check it.
		if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			t.Fatalf("%s is not a quorum queue: %v", q, err)
		}
	}
	_, err := publisher.Dial(context.Background(), publisher.Config{URL: r.URL(), Exchange: exchange, QueueType: "classic"})
	if err == nil || !strings.Contains(err.Error(), "another type") {
		t.Errorf("Dial with classic sinks over quorum ones: %v, want an error naming the queue type", err)
	}
	if _, err := publisher.NewEndpoints(publisher.Config{QueueType: "stream"}, []string{r.URL()}); err == nil {
		t.Error("queue type stream: want a configuration error")
	}
}
