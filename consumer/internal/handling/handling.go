// Package handling holds what the queue consumer and the stream consumer share. It runs a
// handler and commits its transaction. It marks database errors no retry cures. It spaces
// retries and fills in defaults.
//
// It imports no broker client, so a program with the queue consumer links no stream client.
// See docs/architecture.md for the consumers as a whole.
package handling

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Call runs the handler h, turning a panic into an error.
func Call[D any](ctx context.Context, h func(context.Context, pgx.Tx, D) error, tx pgx.Tx, d D) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panic: %v", p)
		}
	}()
	return h(ctx, tx, d)
}

// Begin begins a transaction on a connection of pool that stays with the caller until release.
// A pool's own transaction hands its connection back when the handler ends it. Commit would then
// read the state of a connection another goroutine may use. Release after the deferred rollback.
func Begin(ctx context.Context, pool *pgxpool.Pool) (tx pgx.Tx, release func(), err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	if tx, err = conn.Begin(ctx); err != nil {
		conn.Release()
		return nil, nil, err
	}
	return tx, conn.Release, nil
}

// Commit commits tx once the handler returned nil. A handler that left tx failed, or ended it
// itself, gets handlerErr: a retry is right either way. A transaction the handler committed
// makes the retry a duplicate. Any other failed commit is err, a database error.
func Commit(ctx context.Context, tx pgx.Tx) (handlerErr, err error) {
	if c := tx.Conn(); c != nil && c.PgConn().TxStatus() == 'I' {
		// A COMMIT or ROLLBACK statement of the handler's ended tx unknown to pgx. Commit would
		// succeed outside any transaction, though the writes may have rolled back.
		return errors.New("handler left the transaction unusable: its own statement ended it"), nil
	}
	if err := tx.Commit(ctx); err != nil {
		if errors.Is(err, pgx.ErrTxCommitRollback) || errors.Is(err, pgx.ErrTxClosed) {
			return fmt.Errorf("handler left the transaction unusable: %w", err), nil
		}
		return nil, fmt.Errorf("commit: %w", err)
	}
	return nil, nil
}

// FatalError marks an error as one no retry cures.
type FatalError struct{ Err error }

func (e *FatalError) Error() string { return e.Err.Error() }
func (e *FatalError) Unwrap() error { return e.Err }

// IsFatal reports whether err is, or wraps, a *FatalError.
func IsFatal(err error) bool {
	var fatal *FatalError
	return errors.As(err, &fatal)
}

// ClassifyDB marks SQLSTATE class 42 as fatal. The class holds syntax errors and access rule
// violations: an undefined table, an insufficient privilege.
func ClassifyDB(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 && pgErr.Code[:2] == "42" {
		return &FatalError{err}
	}
	return err
}

// RetryDelay is the pause after failed attempt number attempt (1-based). It starts at backoff
// and doubles with each attempt, up to maxDelay. It never overflows.
func RetryDelay(backoff, maxDelay time.Duration, attempt int) time.Duration {
	d := min(backoff, maxDelay)
	for i := 1; i < attempt && d < maxDelay; i++ {
		if d > maxDelay/2 {
			return maxDelay // doubling would pass it
		}
		d *= 2
	}
	return d
}

// maxErrorHeader bounds the error header: headers travel in one frame.
const maxErrorHeader = 4 << 10

// ErrorHeader is err's text for the error header, cut to 4 KiB.
func ErrorHeader(err error) string {
	s := err.Error()
	if len(s) > maxErrorHeader {
		s = strings.ToValidUTF8(s[:maxErrorHeader], "")
	}
	return s
}

// Sleep waits for d or until ctx ends. It reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// SetDefault sets *v to def if *v is the zero value.
func SetDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
