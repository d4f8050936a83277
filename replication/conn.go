package replication

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/slots"
)

// connectHeard opens a logical replication connection (replication=database).
// It also returns a clock of the last time the connection's socket read any bytes.
// A server sending one long message is not silent, though no whole message arrived for a while.
func connectHeard(ctx context.Context, dsn string) (*pgconn.PgConn, *heardClock, error) {
	cfg, err := slots.ConnConfig(dsn)
	if err != nil {
		return nil, nil, fatal(err)
	}
	heard := newHeardClock()
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return readClock{Conn: c, heard: heard}, nil
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return conn, heard, nil
}

// readClock records when its connection last read any bytes.
type readClock struct {
	net.Conn
	heard *heardClock
}

func (c readClock) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.heard.note()
	}
	return n, err
}

// start sends START_REPLICATION for pgoutput protocol 1, without streaming of in-progress transactions.
// It asks for logical decoding messages if messages is set.
func start(ctx context.Context, conn *pgconn.PgConn, slot, publication string, messages bool, from pglogrepl.LSN) error {
	args := []string{
		"proto_version '1'",
		"publication_names " + quoteLiteral(quoteIdent(publication)),
	}
	if messages {
		args = append(args, "messages 'true'")
	}
	err := pglogrepl.StartReplication(ctx, conn, slot, from, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication, PluginArgs: args,
	})
	if err != nil {
		return fmt.Errorf("start replication from %s: %w", from, classify(err, slot))
	}
	return nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
