package streamconsumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/consumer/internal/handling"
	"github.com/walbox/walbox/internal/streamconn"
)

// startOffset checks the stored offset next against the stream's end and returns where to
// start. An offset past the end is an *OffsetError. Or, as Config.OffsetReset says, it is a
// reset that the offset table records before the session reads. An offset below the stream's
// first message shows in the session: the first message delivered lies past it (gap).
func (c *Consumer) startOffset(ctx context.Context, env *stream.Environment, next int64) (int64, error) {
	if next == 0 {
		return 0, nil // the start of any stream
	}
	end, err := c.end(ctx, env)
	for reads := 1; err == nil && next > end && reads < endReads; reads++ {
		// The client may read from a replica, which may lag the leader. Look again first,
		// through a new subscription, on a member the client picks at random.
		if !handling.Sleep(ctx, endPause) {
			return 0, ctx.Err()
		}
		end, err = c.end(ctx, env)
	}
	if err != nil {
		return 0, err
	}
	if next <= end {
		return next, nil
	}
	oe := &OffsetError{Consumer: c.cfg.ConsumerName, Stream: c.cfg.Stream, Stored: next, First: -1, End: end, ResetTo: -1}
	switch c.cfg.OffsetReset {
	case ResetToFirst:
		if oe.ResetTo, err = read(ctx, env, c.cfg.Stream, stream.OffsetSpecification{}.First(), firstMessage); err != nil {
			return 0, fmt.Errorf("stream %s: read the first message: %w", c.cfg.Stream, err)
		}
	case ResetToEnd:
		oe.ResetTo = end
	default:
		return 0, oe
	}
	if err := c.resetOffset(ctx, next, oe.ResetTo); err != nil {
		return 0, err
	}
	c.cfg.OnError(oe)
	return oe.ResetTo, nil
}

// gap handles the stream's next message after next arriving at offset. The offsets between may
// hold entries that are no message. One is a named producer's state at the start of each
// segment. Another is an offset another application stored in the stream. Those are passed
// over. If instead retention removed next, gap refuses with an *OffsetError. Or it resets the
// stored offset to offset (ResetToFirst: the session goes on). Or it resets it to the stream's
// end (ResetToEnd). That returns an error, so that the next session starts there.
func (c *Consumer) gap(ctx context.Context, next, offset int64) error {
	// The session's connection delivers no more until its handler returns: read on another.
	env, err := stream.NewEnvironment(streamconn.Options().SetUris(c.cfg.URIs))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer env.Close()
	if held, err := c.holds(ctx, env, next); err != nil || held {
		return err
	}
	oe := &OffsetError{Consumer: c.cfg.ConsumerName, Stream: c.cfg.Stream, Stored: next, First: offset, End: -1, ResetTo: -1}
	switch c.cfg.OffsetReset {
	case ResetToFirst:
		oe.ResetTo = offset
	case ResetToEnd:
		end, err := c.end(ctx, env)
		if err != nil {
			return err
		}
		oe.ResetTo = end
	default:
		return oe
	}
	if err := c.resetOffset(ctx, next, oe.ResetTo); err != nil {
		return err
	}
	c.cfg.OnError(oe)
	if oe.ResetTo != offset {
		return errors.New("stream consumer " + c.cfg.ConsumerName + ": offset reset: reading again from the new offset")
	}
	return nil
}

// holds reports whether the stream still holds offset: its first message is at or before it.
// An offset below the first message may be an entry that is no message, first in the first
// segment. The broker's statistics (3.11 and later) then tell by the first entry's offset.
// Without them it is taken for one retention removed.
func (c *Consumer) holds(ctx context.Context, env *stream.Environment, offset int64) (bool, error) {
	first, err := read(ctx, env, c.cfg.Stream, stream.OffsetSpecification{}.First(), firstMessage)
	if err != nil {
		return false, fmt.Errorf("stream %s: read the first message: %w", c.cfg.Stream, err)
	}
	if first <= offset {
		return true, nil
	}
	if stats, err := env.StreamStats(c.cfg.Stream); err == nil {
		if first, err := stats.FirstOffset(); err == nil {
			return first <= offset, nil
		}
	}
	return false, nil
}

// startOffset reads the stream's end up to endReads times, endPause apart. Only then does it
// take a stored offset for one past the end. With two replicas, one that lags for good is picked
// by every read with a chance of one in 2^30. A lag of a few seconds is waited out.
const (
	endReads = 30
	endPause = 100 * time.Millisecond
)

// end returns the offset after the stream's last message, from a read of its last chunk.
func (c *Consumer) end(ctx context.Context, env *stream.Environment) (int64, error) {
	last, err := read(ctx, env, c.cfg.Stream, stream.OffsetSpecification{}.Last(), lastOfChunk)
	if err != nil {
		return 0, fmt.Errorf("stream %s: read the last chunk: %w", c.cfg.Stream, err)
	}
	return last + 1, nil
}

// resetOffset stores to as the next offset if the stored one is still from. Another instance
// of the consumer may have moved it since it was read.
func (c *Consumer) resetOffset(ctx context.Context, from, to int64) error {
	tag, err := c.pool.Exec(ctx, "UPDATE "+c.table+" SET next_offset = $4 WHERE consumer = $1 AND stream = $2 AND next_offset = $3",
		c.cfg.ConsumerName, c.cfg.Stream, from, to)
	if err != nil {
		return handling.ClassifyDB(fmt.Errorf("reset offset: %w", err))
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("reset offset: stored offset moved from %d while it was checked", from)
	}
	return nil
}

// firstMessage takes the first message read: its offset.
func firstMessage(_ stream.ConsumerContext, offset int64, _ int) (int64, bool) { return offset, true }

// lastOfChunk takes the last message of the first chunk read (as many messages as the chunk
// has entries): its offset. The producers of walbox write no sub-entries, one message an entry.
// A chunk of sub-entries ends later than this says.
func lastOfChunk(cc stream.ConsumerContext, offset int64, seen int) (int64, bool) {
	return offset, seen == int(cc.GetEntriesCount())
}

// read subscribes to the stream at spec and returns what take returns once it says done. The
// function take sees each message's context, offset and count so far. The broker sends a chunk
// that exists at once. On an empty stream, read waits for the first one, until ctx ends.
// (Brokers before 3.11 have no stream statistics to tell the stream's bounds.)
func read(ctx context.Context, env *stream.Environment, name string, spec stream.OffsetSpecification,
	take func(cc stream.ConsumerContext, offset int64, seen int) (int64, bool)) (int64, error) {
	found := make(chan int64, 1)
	var seen int // only the client's dispatch goroutine touches it
	c, err := env.NewConsumer(name, func(cc stream.ConsumerContext, _ *amqp.Message) {
		seen++
		if v, done := take(cc, cc.Consumer.GetOffset(), seen); done {
			select {
			case found <- v:
			default:
			}
		}
	}, stream.NewConsumerOptions().SetOffset(spec))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	select {
	case v := <-found:
		return v, nil
	case ev := <-c.NotifyClose():
		return 0, fmt.Errorf("consumer closed: %v", ev.Reason)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
