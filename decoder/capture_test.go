package decoder_test

import (
	"bytes"
	"context"
	"flag"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
)

// TestMain goes through the test harness only when capturing: normal runs need no server, and
// the harness's signal handling would stop fuzzing workers (the fuzzer interrupts them with
// SIGINT).
func TestMain(m *testing.M) {
	flag.Parse()
	if *update {
		os.Exit(testenv.Main(m))
	}
	os.Exit(m.Run())
}

// endMarker is the prefix of the non-transactional logical message that ends a capture. It is
// decoded after every transaction committed before it, and is not kept.
const endMarker = "walbox.golden.end"

// capture runs a golden case against a fresh database and returns the XLogData messages the
// walsender sends for it, as the relay would receive them: pgoutput protocol version 1, text
// format, no streaming. The end marker additionally needs messages 'true'.
func capture(t *testing.T, c goldenCase) []frame {
	t.Helper()
	pg := testenv.SharedPostgres(t)
	dbURL := pg.NewDatabase(t)
	setup := c.setup
	if setup == "" {
		setup = defaultSetup
	}
	pg.Exec(t, dbURL, setup) // the publication must exist before the slot
	if c.migrate {
		conn := pg.Conn(t, dbURL)
		if _, err := migrations.Apply(context.Background(), conn, migrations.Config{}); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	repl := replicationConn(ctx, t, dbURL, c.timeZone)
	slot := testenv.UniqueName("walbox_golden")
	_, err := pglogrepl.CreateReplicationSlot(ctx, repl, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary: true, SnapshotAction: "NOEXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication,
	})
	if err != nil {
		t.Fatalf("create slot: %v", err)
	}
	for _, tx := range c.txs {
		pg.Exec(t, dbURL, tx)
	}
	pg.Exec(t, dbURL, "select pg_logical_emit_message(false, '"+endMarker+"', '')")

	err = pglogrepl.StartReplication(ctx, repl, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'walbox'", "messages 'true'"},
	})
	if err != nil {
		t.Fatalf("start replication: %v", err)
	}
	return receiveFrames(ctx, t, repl)
}

// replicationConn opens a logical replication connection with a fixed TimeZone and DateStyle.
func replicationConn(ctx context.Context, t *testing.T, dbURL, timeZone string) *pgconn.PgConn {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if timeZone == "" {
		timeZone = "UTC"
	}
	q := u.Query()
	q.Set("replication", "database")
	q.Set("TimeZone", timeZone)
	q.Set("DateStyle", "ISO")
	u.RawQuery = q.Encode()
	conn, err := pgconn.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("replication connection: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// receiveFrames reads XLogData messages up to the end marker.
func receiveFrames(ctx context.Context, t *testing.T, conn *pgconn.PgConn) []frame {
	t.Helper()
	var frames []frame
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 || msg.Data[0] != pglogrepl.XLogDataByteID {
				continue // keepalives: the capture is over long before a reply is due
			}
			xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
			if err != nil {
				t.Fatalf("parse XLogData: %v", err)
			}
			if xld.WALData[0] == 'M' && bytes.Contains(xld.WALData, []byte(endMarker+"\x00")) {
				return frames
			}
			frames = append(frames, frame{xld.WALStart, bytes.Clone(xld.WALData)})
		case *pgproto3.ErrorResponse:
			t.Fatalf("replication: %s", msg.Message)
		}
	}
}
