package faults_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
	"github.com/walbox/walbox/internal/testenv"
)

// The fault proxy is toxiproxy's, embedded: one server for the test binary, a proxy per use.
var toxiServer = sync.OnceValue(func() *toxiproxy.ApiServer {
	toxics.Register("walbox_partition", new(partitionToxic))
	return toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
})

// partitionToxic is a silent network partition: it drops every byte and holds back the end of
// the stream, so neither side learns anything (not even that the other closed) until the
// partition heals. Healing then closes the connection, as a peer that timed out in the meantime
// would: the bytes dropped cannot be replayed.
//
// toxiproxy's own timeout toxic drops data but passes a close through, which would tell the
// client at once when the server gives up on it.
type partitionToxic struct{}

func (*partitionToxic) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				<-stub.Interrupt // the source closed: keep that to ourselves until healed
				return
			}
		}
	}
}

func (*partitionToxic) Cleanup(stub *toxics.ToxicStub) { stub.Close() }

// faultProxy forwards TCP connections to a server and injects faults on demand.
type faultProxy struct {
	t           *testing.T
	p           *toxiproxy.Proxy
	addr        string
	partitioned bool
}

// newProxy starts a proxy on a free port of 127.0.0.1 in front of upstream (host:port).
func newProxy(t *testing.T, upstream string) *faultProxy {
	t.Helper()
	p := toxiproxy.NewProxy(toxiServer(), testenv.UniqueName("proxy"), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	fp := &faultProxy{t: t, p: p, addr: p.Listen}
	t.Cleanup(func() {
		fp.heal()
		p.Stop()
	})
	return fp
}

// partition silently drops everything in both directions, on open connections and new ones
// alike (a new connection is accepted, and then hears nothing).
func (fp *faultProxy) partition() {
	fp.t.Helper()
	for _, dir := range []string{"upstream", "downstream"} {
		body := `{"name": "partition_` + dir + `", "type": "walbox_partition", "stream": "` + dir + `"}`
		if _, err := fp.p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			fp.t.Fatalf("partition %s: %v", dir, err)
		}
	}
	fp.partitioned = true
}

// heal ends the partition; the connections that lived through it are closed.
func (fp *faultProxy) heal() {
	if !fp.partitioned {
		return
	}
	for _, dir := range []string{"upstream", "downstream"} {
		if err := fp.p.Toxics.RemoveToxic(context.Background(), "partition_"+dir); err != nil {
			fp.t.Errorf("heal %s: %v", dir, err)
		}
	}
	fp.partitioned = false
}

// down closes every connection and refuses new ones, as an unreachable host that answers with
// a reset would.
func (fp *faultProxy) down() { fp.p.Stop() }

// up accepts connections again, on the same address.
func (fp *faultProxy) up() {
	fp.t.Helper()
	if err := fp.p.Start(); err != nil {
		fp.t.Fatalf("restart proxy on %s: %v", fp.addr, err)
	}
}
