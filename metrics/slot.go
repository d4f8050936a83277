package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
			conn, err = pgx.Connect(ctx, dsn)
		}
		if err == nil {
			err = m.readSlot(ctx, conn, slot)
		}
		if err != nil && ctx.Err() == nil {
			m.PollError()
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
	var retained *int64
	var status *string
	err := conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&retained, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		m.SetSlot(0, "missing")
		return nil
	}
	if err != nil {
		return fmt.Errorf("read slot %s: %w", slot, err)
	}
	var r int64
	var st string
	if retained != nil {
		r = *retained
	}
	if status != nil {
		st = *status
	}
	m.SetSlot(r, st)
	return nil
}
