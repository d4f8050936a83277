package replay

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/walbox/walbox/internal/republish"
)

// batchSize is how many rows one query reads.
const batchSize = 1000

// recordEvery is how often a run waits for the broker's confirms and records its progress.
const recordEvery = time.Second

// The first and last places a row can have in a table. A cursor at firstTID includes the whole
// statement; one at lastTID excludes it.
const (
	firstTID = "(0,0)"
	lastTID  = "(4294967295,65535)"
)

// cursor is a row's key: its transaction's full id, its statement (cmin), its place (ctid).
type cursor struct {
	k, c int64
	t    string
}

// sameStatement reports whether o is a row of the same statement as c.
func (c cursor) sameStatement(o cursor) bool { return c.k == o.k && c.c == o.c }

// row is one row read: its key, its commit time (zero where unknown) and its columns as text.
type row struct {
	key    cursor
	commit time.Time
	values [][]byte
}

// count counts t's rows after cur.
func (r *Replay) count(ctx context.Context, t *table, p progress, cur cursor) (int64, error) {
	var n int64
	if err := r.conn.QueryRow(ctx, t.count, t.argsAt(p, cur)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the rows of %s: %w", t.mapping.Table, err)
	}
	return n, nil
}

// argsAt returns the parameters of t's queries for the replay started at p's horizon and snapshot.
func (t *table) argsAt(p progress, cur cursor) []any {
	return append([]any{p.horizon, cur.k, cur.c, cur.t, p.snapshot}, t.args...)
}

// heldCursor names the cursor a run reads the i-th table with. It is held past its transaction.
// The server sorts the rows once, into a copy, and holds no snapshot while the run reads it. Each
// table's FETCH has its own text: the driver caches a statement's columns by its text.
func heldCursor(i int) string { return "walbox_replay_" + strconv.Itoa(i) }

// openCursor declares the held cursor over t's rows after cur.
func (r *Replay) openCursor(ctx context.Context, t *table, p progress, cur cursor) error {
	_, err := r.conn.Exec(ctx, "DECLARE "+heldCursor(t.index)+" NO SCROLL CURSOR WITH HOLD FOR "+t.query, t.argsAt(p, cur)...)
	if err != nil {
		return fmt.Errorf("select the rows of %s: %w", t.mapping.Table, err)
	}
	return nil
}

// closeCursor closes t's held cursor.
func (r *Replay) closeCursor(ctx context.Context, t *table) error {
	if _, err := r.conn.Exec(ctx, "CLOSE "+heldCursor(t.index)); err != nil {
		return fmt.Errorf("close the cursor: %w", err)
	}
	return nil
}

// fetch reads the next batch of t's rows from the held cursor.
func (r *Replay) fetch(ctx context.Context, t *table) ([]row, error) {
	rows, err := r.conn.Query(ctx, "FETCH "+strconv.Itoa(batchSize)+" FROM "+heldCursor(t.index))
	if err != nil {
		return nil, fmt.Errorf("read the rows of %s: %w", t.mapping.Table, err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		raw := rows.RawValues()
		var rw row
		if rw.key.k, err = strconv.ParseInt(string(raw[0]), 10, 64); err == nil {
			rw.key.c, err = strconv.ParseInt(string(raw[1]), 10, 64)
		}
		if err != nil {
			return nil, fmt.Errorf("read the rows of %s: key: %w", t.mapping.Table, err)
		}
		rw.key.t = string(raw[2])
		if raw[3] != nil {
			us, err := strconv.ParseInt(string(raw[3]), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("read the rows of %s: commit time: %w", t.mapping.Table, err)
			}
			rw.commit = time.UnixMicro(us).UTC()
		}
		rw.values = make([][]byte, len(raw)-4)
		for i, v := range raw[4:] {
			if v != nil {
				rw.values[i] = append([]byte{}, v...)
			}
		}
		out = append(out, rw)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the rows of %s: %w", t.mapping.Table, err)
	}
	return out, nil
}

// run is one Run of a replay.
type run struct {
	*Replay
	pub    *republish.Publisher
	pace   pacer
	report func(Progress)
	sent   int64 // rows confirmed, earlier runs' included, as of the last record
}

func (u *run) result(start time.Time) Result {
	return Result{Sent: u.pub.Published() + u.pub.Parked(), Published: u.pub.Published(), Parked: u.pub.Parked(),
		Duration: time.Since(start)}
}

// table sends t's rows after its recorded progress p. After each second it waits for the broker
// and records the last statement confirmed whole. At the table's end it records the last one.
func (u *run) table(ctx context.Context, t *table, p progress) error {
	name := t.mapping.Table.String()
	done := cursor{k: p.doneXID, c: p.doneCmd}
	cur := cursor{k: p.doneXID, c: p.doneCmd, t: lastTID}
	tableSent := p.sent // rows of t confirmed up to done
	var inStatement int64
	last := time.Now()
	record := func() error {
		if err := u.pub.Wait(ctx); err != nil {
			return err
		}
		if err := u.store.record(ctx, name, done.k, done.c, tableSent); err != nil {
			return err
		}
		last = time.Now()
		if u.report != nil {
			u.report(Progress{Sent: u.sent + inStatement, Matched: u.plan.Matched, Table: t.mapping.Table})
		}
		return nil
	}
	if err := u.openCursor(ctx, t, p, cur); err != nil {
		return err
	}
	for {
		batch, err := u.fetch(ctx, t)
		if err != nil {
			return err
		}
		for _, rw := range batch {
			if err := u.pace.wait(ctx, u.pub.Flush); err != nil {
				return err
			}
			if inStatement > 0 && !rw.key.sameStatement(cur) {
				done, tableSent, u.sent, inStatement = cur, tableSent+inStatement, u.sent+inStatement, 0
			}
			if err := u.pub.Row(ctx, t.rows, t.mapping.Table, rw.values, rw.commit); err != nil {
				return err
			}
			cur = rw.key
			inStatement++
			if time.Since(last) >= recordEvery {
				if err := record(); err != nil {
					return err
				}
			}
		}
		if len(batch) < batchSize {
			break
		}
	}
	if inStatement > 0 {
		done, tableSent, u.sent, inStatement = cur, tableSent+inStatement, u.sent+inStatement, 0
	}
	if err := u.closeCursor(ctx, t); err != nil {
		return err
	}
	return record()
}

// pacer spaces rows to a rate: a row a 1/rate seconds. The broker or the database may hold the run
// back: it saves up at most a second of rows meanwhile.
type pacer struct {
	rate  float64 // rows a second; 0 is no limit
	start time.Time
	n     int64
}

// wait blocks until the next row is due. Before a sleep it calls flush, so what was sent goes out.
func (p *pacer) wait(ctx context.Context, flush func() error) error {
	if p.rate <= 0 {
		return nil
	}
	now := time.Now()
	if p.n == 0 {
		p.start = now
	}
	due := p.start.Add(time.Duration(float64(p.n) / p.rate * float64(time.Second)))
	p.n++
	d := due.Sub(now)
	switch {
	case d < -time.Second:
		p.start, p.n = now, 1
		return nil
	case d <= 0:
		return nil
	}
	if err := flush(); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
