package slots

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// StreamPublisher is a Publisher into a RabbitMQ stream, exactly once (package streampub's
// Session). Recover binds it to this server's system and database, as the relay does, so that
// it publishes under the relay's producer name. Rows the stream holds already are not published
// again (Held). The others are numbered by the relay's rule, each at a position (At) after every
// message the relay stored before the slot was lost and before every row the new slot streams.
type StreamPublisher interface {
	Publisher
	Bind(ctx context.Context, system uint64, database string) error
	At(timeline int32, lsn uint64, index int)
	// Held returns which of ids (message ids) the stream holds, reading it back from its end
	// to before the position (timeline, lsn).
	Held(timeline int32, lsn uint64, ids map[string]bool) (map[string]bool, error)
}

// intoStream prepares a recovery into a stream: it binds sp and reads the gap's rows once for
// their ids, asks the stream which it holds, and returns the function that publishes each
// other row. A row's position is the new slot's consistent point less one, and its rank among
// the rows published: after the relay's messages, which committed before the new slot existed,
// and before the new slot's, which commit at or after that point. A recover run again (killed
// midway, or failed) finds the rows it stored by their ids and numbers the rest on from them.
func (r *Recovery) intoStream(ctx context.Context, tx pgx.Tx, sp StreamPublisher, g Gap, res *Result,
	rp *republisher) (func(*gapTable, [][]byte) error, error) {
	system, err := strconv.ParseUint(r.sys.SystemID, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("system identifier %q: %w", r.sys.SystemID, err)
	}
	if err := sp.Bind(ctx, system, r.sys.DBName); err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	err = r.eachRow(ctx, tx, func(t *gapTable, values [][]byte) error {
		if m, err := t.rows.Message(values); err == nil {
			ids[m.AMQPMessageID()] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, "CLOSE ALL"); err != nil {
		return nil, fmt.Errorf("close the gap's cursors: %w", err)
	}
	held, err := sp.Held(g.Record.Timeline, uint64(g.Record.ConfirmedLSN), ids)
	if err != nil {
		return nil, fmt.Errorf("read what the stream holds: %w", err)
	}
	at := uint64(res.ConsistentPoint) - 1
	var index int
	return func(t *gapTable, values [][]byte) error {
		res.Rows++
		if m, err := t.rows.Message(values); err == nil && held[m.AMQPMessageID()] {
			res.Held++
			return nil
		}
		sp.At(r.sys.Timeline, at, index)
		index++
		return rp.row(ctx, t, values)
	}, nil
}
