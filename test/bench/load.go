package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// producer commits outbox rows into one table over several connections, as an application would.
type producer struct {
	conns []*pgx.Conn
	table string
	size  int // payload bytes
}

var rowColumns = []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers"}

func newProducer(ctx context.Context, dbURL, table string, conns, size int) (*producer, error) {
	p := &producer{table: table, size: size}
	for range conns {
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("producer: connect: %w", err)
		}
		p.conns = append(p.conns, c)
	}
	return p, nil
}

func (p *producer) close() {
	for _, c := range p.conns {
		_ = c.Close(context.Background())
	}
}

func (p *producer) row(seq int) []any {
	return []any{uuid.New(), "order", strconv.Itoa(seq % 1000), "order.created",
		payload(seq, time.Now().UnixNano(), p.size), headersJSON}
}

func (p *producer) insertSQL() string {
	return "INSERT INTO " + p.table + " (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES ($1, $2, $3, $4, $5, $6)"
}

// backlog commits the rows first to first+rows-1 in transactions of txSize rows, as fast as the
// connections allow.
func (p *producer) backlog(ctx context.Context, first, rows, txSize int) error {
	ntx := (rows + txSize - 1) / txSize
	var next atomic.Int64
	return p.each(func(conn *pgx.Conn) error {
		for {
			i := int(next.Add(1) - 1)
			if i >= ntx {
				return nil
			}
			lo := first + i*txSize
			if err := p.commit(ctx, conn, lo, min(lo+txSize, first+rows)); err != nil {
				return err
			}
		}
	})
}

// commit commits rows lo to hi-1 in one transaction.
func (p *producer) commit(ctx context.Context, conn *pgx.Conn, lo, hi int) error {
	if hi-lo == 1 {
		if _, err := conn.Exec(ctx, p.insertSQL(), p.row(lo)...); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		return nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after Commit
	src := pgx.CopyFromSlice(hi-lo, func(i int) ([]any, error) { return p.row(lo + i), nil })
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{p.table}, rowColumns, src); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// steady commits the rows first to first+n-1 at rate rows per second, each in a transaction of
// its own, on a fixed schedule (a late row does not delay the next), and returns when each
// row's COMMIT returned, in Unix nanoseconds, indexed by seq-first.
func (p *producer) steady(ctx context.Context, first, n, rate int) ([]int64, error) {
	commits := make([]int64, n)
	jobs := make(chan int, n)
	go func() {
		defer close(jobs)
		start := time.Now()
		for i := range n {
			due := start.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			jobs <- i
		}
	}()
	sql := p.insertSQL()
	err := p.each(func(conn *pgx.Conn) error {
		for i := range jobs {
			if _, err := conn.Exec(ctx, sql, p.row(first+i)...); err != nil {
				return fmt.Errorf("insert: %w", err)
			}
			commits[i] = time.Now().UnixNano()
		}
		return nil
	})
	if err == nil {
		err = ctx.Err()
	}
	return commits, err
}

// each runs f once per connection, concurrently, and returns the errors.
func (p *producer) each(f func(*pgx.Conn) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(p.conns))
	for i, c := range p.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(c)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
