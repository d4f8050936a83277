package testenv

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// IdleInPool reports whether pool holds conn among its idle connections: handed back, free for
// any goroutine to take.
func IdleInPool(ctx context.Context, pool *pgxpool.Pool, conn *pgx.Conn) bool {
	found := false
	for _, c := range pool.AcquireAllIdle(ctx) {
		found = found || c.Conn() == conn
		c.Release()
	}
	return found
}
