package replication

import (
	"fmt"
	"strings"
	"testing"
)

// A shard's publication dropped is a stop only walbox recover gets past, whichever check saw it.
// The way out names the shard's slot and publication.
// Its migrate creates the publication again with its row filter.
// A CREATE PUBLICATION without one would take every shard's rows.
func TestShardPublicationStopNamesItsWayOut(t *testing.T) {
	r := &Relay{cfg: Config{Slot: "walbox_s1of2", Publication: "walbox_s1of2", Shard: 1, Shards: 2}}
	err := fatal(fmt.Errorf("%w: publication %q", ErrNoPublication, "walbox_s1of2"))
	if !needsRecover(err) {
		t.Fatalf("needsRecover(%v) = false", err)
	}
	if got, want := r.putRight(err), "`walbox migrate --shards 2`"; !strings.Contains(got, want) || strings.Contains(got, "CREATE PUBLICATION") {
		t.Errorf("putRight = %q; want %q and no CREATE PUBLICATION", got, want)
	}
	if got, want := r.wayOut(), "walbox recover --force --slot walbox_s1of2 --publication walbox_s1of2"; got != want {
		t.Errorf("wayOut = %q, want %q", got, want)
	}
}
