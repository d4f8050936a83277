package prune

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/wire"
)

// Horizon is the transaction horizon below which every slot relaying the table has confirmed every
// row. A row whose inserting transaction is older than Xmin committed before the position of each
// slot's record. And the broker confirmed it.
type Horizon struct {
	// Xmin is the oldest recorded horizon of the slots; 0 when there is none, and then prune
	// deletes nothing.
	Xmin uint64
	// Slot is the slot whose record holds Xmin.
	Slot string
	// Slots are the slots found relaying the table.
	Slots []string
	// Why says why there is no horizon, when Xmin is 0.
	Why string
}

// String says where the horizon comes from, or why there is none.
func (h Horizon) String() string {
	if h.Xmin == 0 {
		return h.Why
	}
	return fmt.Sprintf("transaction %d, the horizon slot %s confirmed (the oldest of the slots relaying the table: %s)",
		h.Xmin, h.Slot, strings.Join(h.Slots, ", "))
}

// ReadHorizon finds the slots that relay the table and returns the oldest transaction horizon their
// records hold. The slots are those of every set of shards named after base that publishes the
// table, the single slot included. Every slot whose record covers the table or says nothing yet
// counts too (coveringSlots). A slot without a record, or a record without a usable horizon, leaves
// no horizon. Nothing tells which rows it confirmed. The records are read in the table's schema
// only. That is where walbox migrate created them (--table).
func ReadHorizon(ctx context.Context, conn *pgx.Conn, table wire.Table, base shard.Set) (Horizon, error) {
	var h Horizon
	reg := registry.New(conn, table.Schema)
	names, err := relayingSlots(ctx, conn, table, base, reg)
	if err != nil {
		return h, err
	}
	h.Slots = names
	if len(names) == 0 {
		h.Why = fmt.Sprintf("no publication named after %s publishes %s and no record in walbox_slots covers it: "+
			"nothing tells which rows walbox confirmed (check --slot, --publication and --table)", base.Publication, table)
		return h, nil
	}
	system, next, err := serverIDs(ctx, conn)
	if err != nil {
		return h, err
	}
	for _, name := range names {
		rec, ok, err := reg.Get(ctx, name)
		if err != nil {
			return h, err
		}
		why := ""
		switch {
		case !ok:
			why = fmt.Sprintf("slot %s relays %s but has no record in %s", name, table, reg.Table())
		case rec.ConfirmedXmin == 0:
			why = fmt.Sprintf("the record of slot %s holds no transaction horizon (an adopted slot walbox never confirmed on)", name)
		case rec.SystemID != system:
			why = fmt.Sprintf("the record of slot %s comes from another server (system identifier %s)", name, rec.SystemID)
		case rec.ConfirmedXmin > next || next-rec.ConfirmedXmin >= 1<<31:
			why = fmt.Sprintf("the horizon of slot %s, transaction %d, is too far from the next one, %d, to compare row ids with",
				name, rec.ConfirmedXmin, next)
		}
		if why != "" {
			return Horizon{Slots: names, Why: why + ": prune keeps every row"}, nil
		}
		if h.Xmin == 0 || rec.ConfirmedXmin < h.Xmin {
			h.Xmin, h.Slot = rec.ConfirmedXmin, name
		}
	}
	return h, nil
}

// relayingSlots returns the slots of every set of shards named after base that publishes the table.
// It adds the slots whose records cover it, and returns each once.
func relayingSlots(ctx context.Context, conn *pgx.Conn, table wire.Table, base shard.Set, reg *registry.Store) ([]string, error) {
	layout, err := shard.ReadLayout(ctx, conn, table, base)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range layout.Counts() {
		set := layout.Set(n)
		for k := range n {
			names = append(names, set.SlotName(k))
		}
	}
	covering, err := coveringSlots(ctx, conn, table, reg)
	if err != nil {
		return nil, err
	}
	for _, name := range covering {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names, nil
}

// coveringSlots returns the slots whose records, in reg, say that they cover the table. It returns
// those whose records say nothing yet too. The command walbox recover resets a record without
// coverage, and the relay records it again only once it runs. The slot may relay the table
// meanwhile.
func coveringSlots(ctx context.Context, conn *pgx.Conn, table wire.Table, reg *registry.Store) ([]string, error) {
	var oid *uint32
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1)::pg_catalog.oid", table.Quoted()).Scan(&oid); err != nil {
		return nil, fmt.Errorf("look up %s: %w", table, err)
	}
	if oid == nil {
		return nil, fmt.Errorf("table %s does not exist", table)
	}
	ok, err := reg.Exists(ctx)
	if err != nil || !ok {
		return nil, err
	}
	rows, err := conn.Query(ctx, "SELECT slot_name, coalesce(coverage, '') FROM "+pgx.Identifier{reg.Schema(), "walbox_slots"}.Sanitize()+
		" ORDER BY slot_name")
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", reg.Table(), err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name, coverage string
		if err := rows.Scan(&name, &coverage); err != nil {
			return nil, fmt.Errorf("read %s: %w", reg.Table(), err)
		}
		if (coverage == "" || inspect.CoverageNames(coverage, *oid)) && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", reg.Table(), err)
	}
	return names, nil
}

// serverIDs reads the server's system identifier and the next transaction id.
func serverIDs(ctx context.Context, conn *pgx.Conn) (string, uint64, error) {
	var system, next string
	err := conn.QueryRow(ctx, `SELECT (SELECT system_identifier::pg_catalog.text FROM pg_catalog.pg_control_system()),
		pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::pg_catalog.text`).Scan(&system, &next)
	if err != nil {
		return "", 0, fmt.Errorf("read the system identifier and the next transaction id: %w", err)
	}
	n, err := strconv.ParseUint(next, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("read the next transaction id %q: %w", next, err)
	}
	return system, n, nil
}

// belowCondition selects the rows whose inserting transaction is older than the horizon xmin. A
// row's xmin is 32 bits and wraps around, so it is compared modulo 2^32. Older means more than 0
// and at most 2^31 transactions behind. A row older than that compares as not older and is kept.
func belowCondition(xmin uint64) string {
	if xmin == 0 {
		return "false"
	}
	return fmt.Sprintf("((xmin::pg_catalog.text::pg_catalog.int8 - %d + 4294967296) %% 4294967296) >= 2147483648", xmin%(1<<32))
}
