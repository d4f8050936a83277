package metrics

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/pgconnect"
)

// PollSlot reads the slot's retained WAL and wal_status every interval until ctx ends, over a
// connection of its own. Failures are counted, never fatal: the relay does not depend on them.
func (m *Metrics) PollSlot(ctx context.Context, dsn, slot string, interval time.Duration) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var err error
		if conn == nil || conn.IsClosed() {
			conn, err = pgconnect.Connect(ctx, dsn)
		}
		if err == nil {
			err = m.readSlot(ctx, conn, slot)
		}
		if err != nil && ctx.Err() == nil {
			m.pollError()
			if conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Metrics) readSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	s, err := inspect.ReadSlot(ctx, conn, slot)
	switch {
	case err != nil:
		return err
	case !s.Exists:
		m.setSlot(0, "missing")
		return nil
	}
	var retained int64
	if s.RetainedBytes != nil {
		retained = *s.RetainedBytes
	}
	m.setSlot(retained, s.WALStatus)
	return nil
}
