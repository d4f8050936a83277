package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/slots"
)

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon("migrate")
	noSlot, relayRole, shardsSetting := c.s.get("no-slot"), c.s.get("relay-role"), c.s.get("shards")
	fs := newFlagSet("migrate", "Create the outbox table, its publication and then the replication slot, idempotently", stderr)
	if err := c.parse(fs, args); err != nil {
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
	failover, err := c.failover()
	if err != nil {
		return err
	}
	replURL, err := c.replicationDSN()
	if err != nil {
		return err
	}
	n, err := shardCount(shardsSetting)
	if err != nil {
		return err
	}
	set := shard.Set{Slot: c.slot.value, Publication: c.publication.value, N: max(n, 1)}
	if err := set.Validate(); err != nil {
		return badSetting(shardsSetting, "%v", err)
	}
	fail := c.fail

	conn, err := pgconnect.Connect(ctx, dsn)
	if err != nil {
		return fail(fmt.Errorf("connect to postgres: %w", err))
	}
	defer conn.Close(context.Background())
	// Shards and the single slot do not mix silently: with both, every row would go out twice.
	layout, err := readLayout(ctx, conn, c)
	if err != nil {
		return fail(err)
	}
	if err := layout.CheckMigrate(set.N); err != nil {
		return mismatch(shardsSetting, err)
	}
	if err := checkRole(ctx, conn, relayRole); err != nil {
		return err
	}
	if !skipSlot {
		if err := checkWalLevel(ctx, conn); err != nil {
			return fail(err)
		}
	}
	applied, err := migrations.Apply(ctx, conn, migrations.Config{Table: table, Publication: c.publication.value,
		MessagePrefix: c.messagePrefix.value, NoPublication: set.N > 1, RelayRole: relayRole.value})
	if err != nil {
		return fail(err)
	}
	for _, name := range applied {
		fmt.Fprintf(stdout, "applied %s to %s\n", name, table)
	}
	if set.N > 1 {
		created, err := shard.CreatePublications(ctx, conn, table, set)
		if err != nil {
			return fail(mismatch(shardsSetting, err))
		}
		for _, name := range created {
			fmt.Fprintf(stdout, "created publication %s\n", name)
		}
		if len(applied) == 0 && len(created) == 0 {
			fmt.Fprintf(stdout, "%s and the publications of %s are up to date\n", table, set)
		}
	} else if len(applied) == 0 {
		fmt.Fprintf(stdout, "%s and publication %s are up to date\n", table, c.publication.value)
	}
	if skipSlot {
		return nil
	}
	// The slots come after the publications: pgoutput must find them in the WAL it decodes.
	for k := range set.N {
		if err := ensureSlot(ctx, stdout, dsn, set.SlotName(k), set.PublicationName(k), relayTables(c, table), registry.New(conn, table.Schema), failover, replURL); err != nil {
			return fail(err)
		}
	}
	return nil
}

// checkWalLevel refuses a server without logical decoding before migrate changes anything: the
// slot would fail after the table was created.
func checkWalLevel(ctx context.Context, conn *pgx.Conn) error {
	srv, err := inspect.ReadServer(ctx, conn)
	if err != nil {
		return err
	}
	if srv.WalLevel == "logical" {
		return nil
	}
	return fmt.Errorf("%w: wal_level is %s, so no replication slot can be created; nothing was changed. "+
		"Run ALTER SYSTEM SET wal_level = logical and restart PostgreSQL, then walbox migrate again "+
		"(or --no-slot to create only the table and publication)", inspect.ErrWalLevel, srv.WalLevel)
}

// relayTables are the outbox tables `walbox run` will stream with these settings: the config
// file's, or table.
func relayTables(c *common, table outbox.Table) []outbox.Table {
	maps := c.mappings()
	if len(maps) == 0 {
		return []outbox.Table{table}
	}
	tables := make([]outbox.Table, len(maps))
	for i, m := range maps {
		tables[i] = m.Table
	}
	return tables
}

func ensureSlot(ctx context.Context, stdout io.Writer, dsn, slot, publication string, tables []outbox.Table, reg *registry.Store,
	failover slots.FailoverSlot, replURL string) error {
	created, err := slots.EnsureSlot(ctx, dsn, slot, publication, tables, reg,
		slots.WithFailoverSlot(failover), slots.WithReplicationURL(replURL))
	if err != nil {
		return err
	}
	printSlot(stdout, slot, created)
	return nil
}

// printSlot says whether the slot was created or existed.
func printSlot(out io.Writer, slot string, created bool) {
	if created {
		fmt.Fprintf(out, "created replication slot %s\n", slot)
	} else {
		fmt.Fprintf(out, "replication slot %s exists\n", slot)
	}
}

// checkRole makes a --relay-role that names no role a bad setting.
func checkRole(ctx context.Context, conn *pgx.Conn, st *setting) error {
	if st.value == "" {
		return nil
	}
	exists, err := inspect.RoleExists(ctx, conn, st.value)
	if err != nil {
		return err
	}
	if !exists {
		return badSetting(st, "role %q does not exist: create it first (CREATE ROLE ... LOGIN REPLICATION)", st.value)
	}
	return nil
}
