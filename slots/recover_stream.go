package slots

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/republish"
)

// StreamPublisher is a Publisher into a RabbitMQ stream, exactly once (package streampub's
// Session). Recover binds it to this server's system and database, as the relay does. So it
// publishes under the relay's producer name. Rows the stream holds already are not published again
// (Held). The others are numbered by the relay's rule, each at a position (At). That position comes
// after every message the relay stored before the slot was lost. It comes before every row the new
// slot streams.
type StreamPublisher interface {
	Publisher
	Bind(ctx context.Context, system uint64, database string) error
	At(timeline int32, lsn uint64, index int)
	// Held returns which of ids (message ids) the stream holds. It reads the stream back from its
	// end to before the position (timeline, lsn).
	Held(timeline int32, lsn uint64, ids map[string]bool) (map[string]bool, error)
	// Skips reports whether Publish would take a message at (timeline, lsn, index) for one the
	// stream holds. It names the position of the producer's last message.
	Skips(timeline int32, lsn uint64, index int) (last string, skips bool)
}

// intoStream prepares a recovery into a stream. It binds sp and reads the gap's rows once for their
// ids. It asks the stream which it holds. It returns the function that publishes each other row. It
// returns the one that checks that the stream holds them, once the broker confirmed them. The
// broker confirms a message it drops as a duplicate. A killed recover's messages still on their
// way, numbered otherwise, would make it drop rows. A row's position is the new slot's consistent
// point less one, and its rank among the rows published. So it comes after the relay's messages,
// which committed before the new slot existed. It comes before the new slot's, which commit at or
// after that point. A recover run again (killed midway, or failed) finds the rows it stored by
// their ids. It numbers the rest on from them.
func (r *Recovery) intoStream(ctx context.Context, tx pgx.Tx, sp StreamPublisher, g Gap, res *Result,
	rp *republish.Publisher) (each func(*gapTable, [][]byte) error, stored func() error, err error) {
	system, err := strconv.ParseUint(r.sys.SystemID, 10, 64)
	if err != nil {
		return nil, nil, fmt.Errorf("system identifier %q: %w", r.sys.SystemID, err)
	}
	if err := sp.Bind(ctx, system, r.sys.DBName); err != nil {
		return nil, nil, err
	}
	at := uint64(res.ConsistentPoint) - 1
	if last, skips := sp.Skips(r.sys.Timeline, at, 0); skips {
		return nil, nil, fmt.Errorf("%w: the stream's last message of this relay lies at position %s, "+
			"at or past the new slot's start on timeline %d at %s: this server's WAL is behind what the stream holds "+
			"(a server restored from a backup, a standby that lags the one an earlier recover ran on, "+
			"or a failover that lost WAL the relay had published). Rows numbered here would be taken for stored and dropped. "+
			"Recover once the server's WAL is past that position, or into another stream",
			errStreamAhead, last, r.sys.Timeline, res.ConsistentPoint)
	}
	ids := map[string]bool{}
	err = r.eachRow(ctx, tx, func(t *gapTable, values [][]byte) error {
		if m, err := t.rows.Message(values); err == nil {
			ids[m.AMQPMessageID()] = true
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if _, err := tx.Exec(ctx, "CLOSE ALL"); err != nil {
		return nil, nil, fmt.Errorf("close the gap's cursors: %w", err)
	}
	held, err := sp.Held(g.Record.Timeline, uint64(g.Record.ConfirmedLSN), ids)
	if err != nil {
		return nil, nil, fmt.Errorf("read what the stream holds: %w", err)
	}
	published := map[string]bool{}
	each = func(t *gapTable, values [][]byte) error {
		res.Rows++
		m, err := t.rows.Message(values)
		if err == nil && held[m.AMQPMessageID()] {
			res.Held++
			return nil
		}
		sp.At(r.sys.Timeline, at, len(published))
		parked := rp.Parked()
		if err := rp.Row(ctx, t.rows, t.mapping.Table, values, time.Time{}); err != nil {
			return err
		}
		if rp.Parked() == parked {
			published[m.AMQPMessageID()] = true
		}
		return nil
	}
	stored = func() error {
		found, err := sp.Held(g.Record.Timeline, uint64(g.Record.ConfirmedLSN), published)
		if err != nil {
			return fmt.Errorf("read what the stream holds: %w", err)
		}
		if missing := len(published) - len(found); missing > 0 {
			return fmt.Errorf("the broker confirmed %d rows of the gap it did not store (it dropped them as duplicates: "+
				"another session used their publishing ids, such as a killed recover whose messages arrived late); "+
				"run walbox recover again: it publishes them anew", missing)
		}
		return nil
	}
	return each, stored, nil
}
