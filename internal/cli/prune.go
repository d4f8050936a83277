package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/internal/prune"
	"github.com/walbox/walbox/outbox"
)

func runPrune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon("prune")
	fs := newFlagSet("prune", "Delete outbox rows older than --older-than in short transactions of --batch-size rows; "+
		"safe while walbox runs (the publication does not publish deletes). Only rows below the transaction horizon every slot "+
		"relaying the table confirmed go (walbox_slots records it); the others are kept back, whatever their age", stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	job, dsn := c.v.prune, c.v.relay.DatabaseURL
	job.CreatedAt, job.Base, job.Table = outbox.ColCreatedAt, c.set(), c.v.relay.Table
	fail := c.fail

	ctx, stop := signalContext(ctx, func() {})
	defer stop()
	conn, err := pgconnect.Connect(ctx, dsn)
	if err != nil {
		return fail(fmt.Errorf("connect to postgres: %w", err))
	}
	defer conn.Close(context.Background())
	res, err := job.Run(ctx, conn)
	if job.DryRun && err == nil {
		fmt.Fprintf(stdout, "would delete %d rows created before %s from %s (dry run: nothing deleted)\n",
			res.Rows, res.Cutoff.UTC().Format(time.RFC3339), job.Table)
		showKept(stdout, res)
		return nil
	}
	if !res.Cutoff.IsZero() {
		fmt.Fprintf(stdout, "deleted %d rows created before %s from %s in %d batches\n",
			res.Rows, res.Cutoff.UTC().Format(time.RFC3339), job.Table, res.Batches)
		showKept(stdout, res)
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

// showKept says how many old rows prune keeps back, and why. Only rows go that are below the
// horizon every relaying slot confirmed.
func showKept(w io.Writer, res prune.Result) {
	cutoff := res.Cutoff.UTC().Format(time.RFC3339)
	switch {
	case res.Horizon.Xmin == 0:
		fmt.Fprintf(w, "kept %d rows created before %s: %s\n", res.Kept, cutoff, res.Horizon)
	case res.Kept == 0:
		fmt.Fprintf(w, "rows go only below %s\n", res.Horizon)
	default:
		fmt.Fprintf(w, "kept %d rows created before %s that walbox may not have confirmed: they are not below %s\n",
			res.Kept, cutoff, res.Horizon)
	}
}
