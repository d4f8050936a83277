package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// pgbenchSeq numbers the rows pgbench inserts, from the first seq after the warm-up on, so that
// the consumer indexes them as it does the in-process producer's. setup creates it before the
// trial's CHECKPOINT, so that its catalog rows' WAL falls into no measured window.
const pgbenchSeq = "bench_seq"

var pgbenchSeqDDL = fmt.Sprintf("CREATE SEQUENCE %s MINVALUE 0 START %d", pgbenchSeq, warmupRows)

// pgbench commits the window's n rows, seq warmupRows to warmupRows+n-1, through PostgreSQL's pgbench: a
// process of its own, with one connection per producer, each row a single-statement transaction,
// at the scenario's rate. It records pgbench's achieved rate and schedule lag on r.
func (t *trial) pgbench(ctx context.Context, r *Result, n int) error {
	bin := testenv.PGBin("pgbench")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("pgbench load: %w (install postgresql-15, or set WALBOX_TEST_PG_BIN)", err)
	}
	dir, clients := t.b.cfg.WorkDir, t.b.cfg.Producers
	script := filepath.Join(dir, t.label+"-pgbench.sql")
	if err := os.WriteFile(script, []byte(pgbenchScript(t.table, warmupRows, t.sc.Payload)), 0o644); err != nil {
		return fmt.Errorf("pgbench load: %w", err)
	}
	prefix := filepath.Join(dir, t.label+"-pgbench-tx")
	// A reused work directory may hold an earlier run's logs under the same prefix: they would be
	// read as this run's.
	old, _ := filepath.Glob(prefix + ".*")
	for _, name := range old {
		if err := os.Remove(name); err != nil {
			return fmt.Errorf("pgbench load: remove an earlier run's log: %w", err)
		}
	}
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", "1", "-R", strconv.Itoa(t.sc.Rate),
		"-t", strconv.Itoa(n / clients), "-f", script, "-l", "--log-prefix", prefix}
	cmdline := "pgbench " + strings.Join(args, " ")
	// The database URL goes in the environment, which pgbench reads as its database argument,
	// so that no password can show in an error.
	p, err := start(dir, t.label+"-pgbench", bin, []string{"PGDATABASE=" + t.dbURL}, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", cmdline, err)
	}
	defer context.AfterFunc(ctx, p.kill)()
	err = p.wait(t.sc.Duration + stallTimeout)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", cmdline, err)
	}
	return readPgbenchLogs(prefix, r, n)
}

// pgbenchScript is pgbench's transaction: one statement that inserts one row into table, with
// the body payload builds for its seq, its ts taken by clock_timestamp() as the row is inserted
// and its seq from pgbenchSeq, and the in-process producer's other columns. Every row has the
// same padding, which at the size of the steady scenarios changes nothing but the bytes: TOAST
// compresses none of them.
func pgbenchScript(table string, first, size int) string {
	head, tail := payloadEnds(first, time.Now().UnixNano())
	return fmt.Sprintf(`WITH s AS (SELECT nextval('%s') AS seq)
INSERT INTO %s (id, aggregate_type, aggregate_id, event_type, payload, headers)
SELECT gen_random_uuid(), 'order', (seq %% 1000)::text, 'order.created',
       jsonb_build_object('ts', (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint, 'pad', %s::text, 'seq', seq),
       %s::jsonb
FROM s;
`, pgbenchSeq, table, quote(pad(first, size-len(head)-len(tail))), quote(headersJSON))
}

// quote returns s as an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// readPgbenchLogs reads pgbench's per-transaction logs (one file per thread) and records on r
// the rate at which its transactions ended and how late each started against its schedule.
func readPgbenchLogs(prefix string, r *Result, n int) error {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil || len(files) == 0 {
		return fmt.Errorf("pgbench load: no transaction log %s.*", prefix)
	}
	var ends []int64
	var lags []time.Duration
	for _, name := range files {
		e, l, err := readPgbenchLog(name)
		if err != nil {
			return err
		}
		ends, lags = append(ends, e...), append(lags, l...)
	}
	if len(ends) != n {
		return fmt.Errorf("pgbench load: %d transactions logged, want %d", len(ends), n)
	}
	_, r.ProducerRate = span(ends)
	r.LoadLag = percentilesOf(lags)
	return nil
}

func readPgbenchLog(name string) ([]int64, []time.Duration, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, fmt.Errorf("pgbench load: %w", err)
	}
	defer f.Close()
	ends, lags, err := parsePgbenchLog(f)
	if err != nil {
		return nil, nil, fmt.Errorf("pgbench load: %s: %w", filepath.Base(name), err)
	}
	return ends, lags, nil
}

// parsePgbenchLog parses a per-transaction log of pgbench 15 run with --rate, a line per
// transaction:
//
//	client_id transaction_no time script_no time_epoch time_us schedule_lag [retries]
//
// time is the transaction's latency and schedule_lag how late it started against its schedule,
// in microseconds; time_epoch (seconds) and time_us (microseconds) say when it ended. It returns
// each transaction's end in Unix nanoseconds and its schedule lag. A skipped or failed
// transaction (its time "skipped" or "failed") is an error: its row was not committed.
func parsePgbenchLog(r io.Reader) (ends []int64, lags []time.Duration, err error) {
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 7 {
			return nil, nil, fmt.Errorf("line %d: %q: want 7 fields or more (client, transaction, time, script, "+
				"epoch, µs, schedule lag)", line, sc.Text())
		}
		if _, err := strconv.ParseFloat(f[2], 64); err != nil {
			return nil, nil, fmt.Errorf("line %d: transaction %s of client %s: %s", line, f[1], f[0], f[2])
		}
		sec, err1 := strconv.ParseInt(f[4], 10, 64)
		usec, err2 := strconv.ParseInt(f[5], 10, 64)
		lag, err3 := strconv.ParseFloat(f[6], 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, nil, fmt.Errorf("line %d: %q: %w", line, sc.Text(), err)
		}
		ends = append(ends, sec*1e9+usec*1e3)
		lags = append(lags, time.Duration(lag*float64(time.Microsecond)))
	}
	return ends, lags, sc.Err()
}
