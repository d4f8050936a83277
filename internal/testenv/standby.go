package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// StartStandby makes a hot standby of primary: pg_basebackup -R -C -S slot (which creates the
// physical slot on primary, and writes standby.signal and a primary_conninfo that names the
// slot and the postgres database), then starts it on a port of its own with the primary's
// settings and opts'. It runs the same version as primary, in the same chroot. tb.Cleanup stops
// it and removes its directory. For slot synchronisation (PostgreSQL 17+), pass
// WithSetting("sync_replication_slots", "on") and WithSetting("hot_standby_feedback", "on").
func StartStandby(tb TB, primary *Postgres, slot string, opts ...PGOption) *Postgres {
	tb.Helper()
	primary.mustOwn(tb, "StartStandby")
	var cfg pgConfig
	for _, o := range opts {
		o(&cfg)
	}
	s := &Postgres{settings: append(append([]setting(nil), primary.settings...), cfg.settings...),
		root: primary.root, binDir: primary.binDir, cred: primary.cred}
	if err := s.baseBackup(primary, slot); err != nil {
		s.shutdown()
		tb.Fatalf("testenv: standby: %v", err)
	}
	var err error
	for range startAttempts {
		if s.port, err = freePort(); err != nil {
			break
		}
		if err = s.writeConf(); err != nil {
			break
		}
		if err = s.start(); !errors.Is(err, errInUse) {
			break
		}
	}
	if err != nil {
		s.shutdown()
		tb.Fatalf("testenv: standby: %v", err)
	}
	tb.Cleanup(s.shutdown)
	return s
}

// baseBackup copies primary's data directory into a new instance directory of s.
func (s *Postgres) baseBackup(primary *Postgres, slot string) error {
	dir, err := makeDirIn(s.tmpDir(), "pg")
	if err != nil {
		return err
	}
	s.dir = dir
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("chown %s: %w", dir, err)
		}
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres", primary.port)
	cmd := exec.Command(s.bin("pg_basebackup"), "-d", conninfo, "-D", inRoot(s.root, s.dataDir()),
		"-R", "-C", "-S", slot, "-X", "stream", "--checkpoint=fast", "--no-sync")
	s.prepare(cmd)
	if out, err := run("pg_basebackup", cmd, scaled(pgStartTimeout)); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}

// Promote promotes a standby to primary (pg_promote) and waits until it is one. A standby may
// be in a crash restart (a test killed its WAL receiver): a failed connection or query is tried
// again until the deadline. A standby a lost call already promoted is left as it is.
func (p *Postgres) Promote(tb TB) {
	tb.Helper()
	p.mustOwn(tb, "Promote")
	ctx, cancel := context.WithTimeout(context.Background(), scaled(pgStartTimeout)+sqlTimeout)
	defer cancel()
	for {
		err := p.promote(ctx)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			tb.Fatalf("testenv: promote: %v%s", err, logTail(p.logFile()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// promote makes one attempt of Promote.
func (p *Postgres) promote(ctx context.Context) error {
	conn, err := connect(ctx, p.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var standby bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_is_in_recovery()").Scan(&standby); err != nil {
		return fmt.Errorf("pg_is_in_recovery: %w", err)
	}
	if !standby {
		return nil
	}
	var done bool
	wait := int(scaled(pgStartTimeout).Seconds())
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_promote(true, $1)", wait).Scan(&done); err != nil {
		return fmt.Errorf("pg_promote: %w", err)
	}
	if !done {
		return errors.New("pg_promote: not promoted")
	}
	return nil
}

// PauseReceiver stops the standby's WAL receiver process (SIGSTOP) and returns its pid. What the
// primary sends meanwhile waits unread in the socket. tb.Cleanup resumes it, if still there.
func (p *Postgres) PauseReceiver(tb TB) int {
	tb.Helper()
	p.mustOwn(tb, "PauseReceiver")
	ctx, cancel := context.WithTimeout(context.Background(), sqlTimeout)
	defer cancel()
	conn, err := connect(ctx, p.url)
	if err != nil {
		tb.Fatalf("testenv: pause the WAL receiver: %v", err)
	}
	defer conn.Close(context.Background())
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pid FROM pg_catalog.pg_stat_wal_receiver").Scan(&pid); err != nil {
		tb.Fatalf("testenv: pause the WAL receiver: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		tb.Fatalf("testenv: pause the WAL receiver %d: %v", pid, err)
	}
	tb.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	return pid
}

// StartFailoverPair starts a PostgreSQL 17 primary of the test's own and its standby, with slot
// standby1. The primary's synchronized_standby_slots names that slot, so failover slots wait for
// the standby. opts are the standby's settings (sync_replication_slots, say).
func StartFailoverPair(tb TB, opts ...PGOption) (primary, standby *Postgres) {
	tb.Helper()
	primary = StartPostgres(tb, PGVersion(17))
	RequireOwn(tb, primary)
	standby = StartStandby(tb, primary, "standby1", opts...)
	primary.Exec(tb, primary.URL(), "ALTER SYSTEM SET synchronized_standby_slots = 'standby1'")
	primary.Exec(tb, primary.URL(), "SELECT pg_catalog.pg_reload_conf()")
	return primary, standby
}
