package republish

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/pgconnect"
)

// Connect opens an ordinary connection that reads rows as the walsender writes them: text,
// timestamps in the ISO style. The server lists it under the name app.
func Connect(ctx context.Context, dsn, app string) (*pgx.Conn, error) {
	pcfg, err := pgconnect.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("parse database url: not a valid connection string or URL")
	}
	pcfg.RuntimeParams["DateStyle"] = "ISO"
	pcfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return conn, nil
}
