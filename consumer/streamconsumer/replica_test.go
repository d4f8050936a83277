package streamconsumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/walbox/walbox/consumer/streamconsumer"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
)

// On a three-node cluster the client reads from a replica at random, and one replica is held
// back: it has 100 of the stream's 200 messages. A consumer that handled all 200 is started 24
// times, four at a time. It is never refused as past the stream's end, since its reads of the
// end go through new subscriptions until one reaches a member that keeps up. (Before, 3 reads
// refused about one start in 8: a caught-up consumer stopped with a fatal *OffsetError.)
func TestStreamConsumerCaughtUpIsNotRefusedOnALaggingReplica(t *testing.T) {
	skipShort(t)
	c := testenv.StartStreamCluster(t)
	name := testenv.UniqueName("events")
	oe := newOffsetEnvOn(t, c.Node(0), name)
	s, err := streampub.Dial(context.Background(), streampub.Config{URIs: []string{oe.uri}, Stream: name, Producer: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	publish := func(from, n int) {
		for i := from; i < from+n; i++ {
			s.At(1, uint64(i+1), 0)
			m := &wire.Message{ID: uuid.New(), EventType: "order.created", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
			if _, err := s.Publish(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		for range n {
			if c := <-s.Confirms(); c.Err != nil {
				t.Fatal(c.Err)
			}
		}
	}
	publish(0, 100)
	time.Sleep(2 * time.Second) // every replica has them
	t.Cleanup(c.HoldBackReplica(t, name))
	publish(100, 100)

	// The consumer handled all 200 (from the leader or the replica that keeps up).
	if _, err := oe.pool.Exec(context.Background(), `CREATE TABLE walbox_stream_offsets (consumer text NOT NULL,
		stream text NOT NULL, next_offset bigint NOT NULL, PRIMARY KEY (consumer, stream))`); err != nil {
		t.Fatal(err)
	}
	if _, err := oe.pool.Exec(context.Background(), "INSERT INTO walbox_stream_offsets VALUES ('billing', $1, 200)", name); err != nil {
		t.Fatal(err)
	}
	// The starts are independent: each reads the end through subscriptions of its own. Four at a
	// time, since a start that is not refused runs until its context ends.
	const starts, together = 24, 4
	for from := 0; from < starts; from += together {
		var wg sync.WaitGroup
		for i := from; i < from+together; i++ {
			cn, err := streamconsumer.New(oe.pool, oe.config(), recordEffect)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				var oerr *streamconsumer.OffsetError
				if err := cn.Run(ctx); errors.As(err, &oerr) {
					t.Errorf("start %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}
