package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/replication"
)

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon()
	noSlot := c.s.addBool("no-slot", "WALBOX_MIGRATE_NO_SLOT", "false",
		"do not create the replication slot (for a role without REPLICATION; `walbox run` creates it later)")
	fs := newFlagSet("migrate", "Create the outbox table, its publication and then the replication slot, idempotently", stderr)
	c.s.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := c.s.resolve(); err != nil {
		return err
	}
	dsn, err := c.dsn()
	if err != nil {
		return err
	}
	table, err := c.outboxTable()
	if err != nil {
		return err
	}
	skipSlot, err := noSlot.bool()
	if err != nil {
		return err
	}
	fail := func(err error) error { return errors.New(redact.Text(err.Error(), c.secrets()...)) }

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fail(fmt.Errorf("connect to postgres: %w", err))
	}
	defer conn.Close(context.Background())
	applied, err := migrations.Apply(ctx, conn, migrations.Config{Table: table, Publication: c.publication.value,
		MessagePrefix: c.messagePrefix.value})
	if err != nil {
		return fail(err)
	}
	for _, name := range applied {
		fmt.Fprintf(stdout, "applied %s to %s\n", name, table)
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "%s and publication %s are up to date\n", table, c.publication.value)
	}
	if skipSlot {
		return nil
	}
	// The slot comes after the publication: pgoutput must find the publication in the WAL it decodes.
	created, err := replication.EnsureSlot(ctx, dsn, c.slot.value, registry.New(conn, table.Schema))
	if err != nil {
		return fail(err)
	}
	if created {
		fmt.Fprintf(stdout, "created replication slot %s\n", c.slot.value)
	} else {
		fmt.Fprintf(stdout, "replication slot %s exists\n", c.slot.value)
	}
	return nil
}
