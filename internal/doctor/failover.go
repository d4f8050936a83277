package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// failoverSince is the first PostgreSQL major version with failover slots.
const failoverSince = 170000

// failoverChecks judges what a failover of the primary does to walbox's slot. On PostgreSQL 17 and
// later the slot must be a failover slot. And synchronized_standby_slots must hold logical decoding
// back until the standbys have the WAL. Otherwise walbox may publish a row that the promoted
// standby never had.
func (d doctor) failoverChecks(ctx context.Context, conn *pgx.Conn, f pgFacts) []Check {
	var num int
	var syncSlots, physical string
	err := conn.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version_num')::int,
			coalesce(pg_catalog.current_setting('synchronized_standby_slots', true), ''),
			coalesce((SELECT pg_catalog.string_agg(slot_name, ', ' ORDER BY slot_name) FROM pg_replication_slots WHERE slot_type = 'physical'), '')`).
		Scan(&num, &syncSlots, &physical)
	if err != nil {
		return []Check{failCheck("failover_slot", "", "read the failover settings: %v", err)}
	}
	switch {
	case f.InRecovery:
		return nil // connectCheck failed already
	case d.standby != "":
		return []Check{standbyNote(d.slot)}
	case num < failoverSince && d.failover == "on":
		return []Check{failCheck("failover_slot", "set --failover-slot auto or off, or upgrade to PostgreSQL 17",
			"--failover-slot on, but PostgreSQL %d has no failover slots: walbox run refuses to start", num/10000)}
	case num < failoverSince:
		return []Check{passCheck("failover_slot", "PostgreSQL %d has no failover slots: after a failover the new primary "+
			"has no slot %s, and `walbox recover` republishes the rows since (17 and later keep the slot)", num/10000, d.slot)}
	case d.failover == "off":
		return []Check{passCheck("failover_slot", "--failover-slot off: slot %s is not kept by standbys, "+
			"and after a failover `walbox recover` republishes the rows since", d.slot)}
	}
	return []Check{failoverSlotCheck(f, d.slot), syncStandbyCheck(syncSlots, physical)}
}

func failoverSlotCheck(f pgFacts, slot string) Check {
	switch {
	case !f.slot.Exists:
		return passCheck("failover_slot", "slot %s does not exist yet; walbox creates it as a failover slot", slot)
	case !f.slot.Failover:
		return warnCheck("failover_slot", "restart `walbox run` (at start it makes its slot a failover slot), or over a "+
			"replication connection: ALTER_REPLICATION_SLOT "+slot+" (FAILOVER true)",
			"slot %s is not a failover slot: a standby does not keep it, and after a failover walbox stops until "+
				"`walbox recover` republishes the rows since", slot)
	}
	return passCheck("failover_slot", "slot %s is a failover slot: a standby with sync_replication_slots = on keeps it for a promotion", slot)
}

func syncStandbyCheck(syncSlots, physical string) Check {
	if syncSlots != "" {
		return passCheck("synchronized_standby_slots", "synchronized_standby_slots = '%s': walbox receives no change "+
			"before those standbys have it", syncSlots)
	}
	name := "the standby's physical slot"
	if physical != "" {
		name = physical
	}
	return warnCheck("synchronized_standby_slots",
		fmt.Sprintf("on the primary: ALTER SYSTEM SET synchronized_standby_slots = '%s'; SELECT pg_reload_conf() "+
			"(the physical slots of the standbys that sync walbox's slot, with sync_replication_slots = on)", strings.ReplaceAll(name, "'", "''")),
		"synchronized_standby_slots is not set: walbox may publish a row the standby does not have yet, and after a "+
			"failover the new primary never had it; its slot may also be behind walbox's record")
}
