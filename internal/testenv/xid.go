package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/jackc/pgx/v5"
)

// xactPerSegment is how many transactions one pg_xact file holds: 32 pages of 8 kB, 4 a byte.
const xactPerSegment = 32 * 8192 * 4

// JumpXID moves the server's next transaction id to next, as a year of traffic would. It freezes
// every database first, so old rows stay visible. Then it stops the server and runs pg_resetwal -x.
// It gives the new id its pg_xact file, and starts the server again. Connections are lost. Leave
// commit timestamps off. A jump of less than two billion keeps the server accepting writes.
func (p *Postgres) JumpXID(tb TB, next uint32) {
	tb.Helper()
	p.mustOwn(tb, "JumpXID")
	if err := p.freezeAll(); err != nil {
		tb.Fatalf("testenv: freeze before an xid jump: %v", err)
	}
	p.Stop(tb, "fast")
	seg := filepath.Join(p.dataDir(), "pg_xact", fmt.Sprintf("%04X", next/xactPerSegment))
	if err := os.WriteFile(seg, make([]byte, xactPerSegment/4), 0o600); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	if p.cred != nil {
		if err := os.Chown(seg, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			tb.Fatalf("testenv: %v", err)
		}
	}
	cmd := exec.Command(p.bin("pg_resetwal"), "-x", fmt.Sprint(next), inRoot(p.root, p.dataDir()))
	p.prepare(cmd)
	if out, err := run("pg_resetwal", cmd, scaled(pgStartTimeout)); err != nil {
		tb.Fatalf("testenv: %v\n%s", err, out)
	}
	p.Start(tb)
}

// freezeAll runs VACUUM FREEZE in every database, template0 included.
func (p *Postgres) freezeAll() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*sqlTimeout)
	defer cancel()
	conn, err := connect(ctx, p.url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "UPDATE pg_database SET datallowconn = true WHERE datname = 'template0'"); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database")
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := execSQL(p.databaseURL(name), "VACUUM FREEZE"); err != nil {
			return fmt.Errorf("database %s: %w", name, err)
		}
	}
	_, err = conn.Exec(ctx, "UPDATE pg_database SET datallowconn = false WHERE datname = 'template0'")
	return err
}
