package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

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
	fs := newFlagSet("migrate", "Create the outbox table, its publication and then the replication slot, idempotently", stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	r, skipSlot, shardsSetting := c.v.relay, c.v.noSlot, c.s.get("shards")
	dsn, table := r.DatabaseURL, r.Table
	set := c.set()
	set.N = max(c.v.shards, 1)
	if err := set.Validate(); err != nil {
		return badSetting(shardsSetting, "%v", err)
	}
	if err := checkPositionShards(c, set.N, shardsSetting); err != nil {
		return err
	}
	if set.N > 1 {
		if err := shard.OneTable(table, relayTables(c, table)); err != nil {
			return badSetting(shardsSetting, "%v", err)
		}
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
	if err := checkPositionFilters(ctx, conn, c); err != nil {
		return fail(err)
	}
	if err := checkRole(ctx, conn, c.s.get("relay-role")); err != nil {
		return err
	}
	if !skipSlot {
		if err := checkWalLevel(ctx, conn); err != nil {
			return fail(err)
		}
	}
	applied, err := migrations.Apply(ctx, conn, migrations.Config{Table: table, Publication: r.Publication,
		MessagePrefix: r.MessagePrefix, NoPublication: set.N > 1, RelayRole: c.v.relayRole})
	if err != nil {
		return fail(err)
	}
	for _, name := range applied {
		fmt.Fprintf(stdout, "applied %s to %s\n", name, table)
	}
	if err := warnRights(ctx, stderr, conn, table.Schema); err != nil {
		return fail(err)
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
		fmt.Fprintf(stdout, "%s and publication %s are up to date\n", table, r.Publication)
	}
	if skipSlot {
		return nil
	}
	// The slots come after the publications: pgoutput must find them in the WAL it decodes.
	for k := range set.N {
		if err := ensureSlot(ctx, stdout, dsn, set.SlotName(k), set.PublicationName(k), relayTables(c, table), registry.New(conn, table.Schema), r.FailoverSlot, r.ReplicationURL); err != nil {
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

// warnRights names the roles that may still move walbox's record once migrate restricted the
// grants. The owner, the recorded relay roles and superusers are left out. The others are:
//   - members of a role that holds a right (the relay role, pg_write_all_data);
//   - the schema's owner;
//   - roles whose grants were kept without --relay-role.
//
// Migrate does not take memberships or schemas away; walbox doctor fails on each of them.
func warnRights(ctx context.Context, w io.Writer, conn *pgx.Conn, schema string) error {
	r, err := migrations.ReadRights(ctx, conn, schema)
	if err != nil {
		return err
	}
	for _, h := range r.Holders {
		var what []string
		if len(h.Execute) > 0 {
			what = append(what, "execute "+strings.Join(h.Execute, ", "))
		}
		if len(h.Grant) > 0 {
			what = append(what, "grant EXECUTE on "+strings.Join(h.Grant, ", "))
		}
		if len(h.Write) > 0 {
			what = append(what, "write "+strings.Join(h.Write, ", "))
		}
		via := ""
		if len(h.Via) > 0 {
			via = " as a member of " + strings.Join(h.Via, ", ")
		}
		fmt.Fprintf(w, "warning: %s may %s%s: it can move walbox's record past a gap (walbox doctor fails until it may not)\n",
			h.Role, strings.Join(what, " and "), via)
	}
	for _, h := range r.AlmostSuperusers {
		via := ""
		if len(h.Via) > 0 {
			via = " as a member of " + strings.Join(h.Via, ", ")
		}
		fmt.Fprintf(w, "warning: %s may act as a superuser, or grant itself any role but a superuser%s (%s): "+
			"it can make itself the relay role and move walbox's record past a gap (walbox doctor fails until it may not)\n",
			h.Role, via, strings.Join(h.Powers, ", "))
	}
	for _, o := range r.SchemaOwners {
		fmt.Fprintf(w, "warning: %s owns schema %s, or is a member of its owner: it may drop walbox's record and create its own "+
			"(walbox doctor fails until it may not)\n", o, schema)
	}
	return nil
}
