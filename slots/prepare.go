package slots

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/registry"
)

// PrepareConfig is what Prepare needs of a relay's session: its connections, the registry and
// the server it identified.
type PrepareConfig struct {
	Slot string
	// Conn is the session's logical replication connection, to the replication server.
	Conn *pgconn.PgConn
	// Primary is an ordinary connection to the primary, where the record lives (see Create).
	Primary Execer
	// SlotDB reads the slot: an ordinary connection to the replication server.
	SlotDB   inspect.Querier
	Registry *registry.Store
	// System is what IDENTIFY_SYSTEM returned on Conn.
	System pglogrepl.IdentifySystemResult
	// Create allows creating the slot where nothing was ever recorded for it.
	Create   bool
	Failover FailoverSlot
	// Xmin returns the xmin horizon to record with a slot created at lsn (registry.Record's
	// ConfirmedXmin).
	Xmin func(lsn pglogrepl.LSN) uint64
}

// Prepared is what Prepare did, and the slot it left to stream from.
type Prepared struct {
	Slot inspect.Slot
	// Recorded is the position recorded for the slot.
	Recorded pglogrepl.LSN
	// Created: the slot was missing, nothing was recorded for it, and Prepare created and
	// recorded it. Adopted: the slot existed unrecorded and Prepare recorded it (set even when
	// a later step failed). MadeFailover: Prepare made the slot a failover slot.
	Created, Adopted, MadeFailover bool
}

// Prepare reads the slot a relay is about to stream from and compares it with the registry. The
// registry is the database's record of the slots walbox created or streamed from. Prepare creates
// the slot only where nothing was ever recorded. It refuses a slot that is a gap in which rows may
// have been skipped:
//   - a slot that is missing though recorded;
//   - a slot ahead of the recorded position;
//   - a slot recorded on another system.
//
// It refuses a slot whose record holds a stop (a *StopRecorded). It refuses one that another
// process streams from (ErrSlotActive). It may make an existing inactive slot a failover slot,
// which does not move it. An error of Refused is one retrying cannot fix.
func Prepare(ctx context.Context, c PrepareConfig) (Prepared, error) {
	var p Prepared
	info, err := inspect.ReadSlot(ctx, c.SlotDB, c.Slot)
	p.Slot = info
	if err != nil {
		return p, err
	}
	if err := info.Usable(c.System.DBName); err != nil {
		return p, refused{err}
	}
	rec, recorded, err := c.Registry.Get(ctx, c.Slot)
	if err != nil {
		return p, err
	}
	switch {
	case !info.Exists && recorded:
		return p, refused{fmt.Errorf("%w: slot %s was dropped or lost; walbox last confirmed %s on it at %s, and rows committed "+
			"after that are in no slot. walbox will not recreate it: run `walbox recover` (see docs/operations.md, Slot lost)",
			ErrSlotMissing, c.Slot, rec.ConfirmedLSN, rec.ConfirmedAt.UTC().Format(time.RFC3339))}
	case !info.Exists:
		return create(ctx, c)
	case !recorded && info.Active:
		// Not recorded while another process holds it: walbox reshard may be creating it, at no
		// position yet. Its creator records it.
		return p, fmt.Errorf("%w: slot %s is held by pid %d and not recorded yet", ErrSlotActive, c.Slot, deref(info.ActivePID))
	case !recorded:
		// Its position serves as its consistent point, as in recordFound. A reshard killed before it
		// recorded a new slot leaves one. Its rerun takes the cut from this record.
		rec = registry.Record{Slot: c.Slot, SystemID: c.System.SystemID, Timeline: c.System.Timeline,
			Origin: registry.OriginAdopted, CreatedLSN: info.ConfirmedFlush, ConfirmedLSN: info.ConfirmedFlush}
		if _, err := c.Registry.Register(ctx, rec); err != nil {
			return p, err
		}
		if rec, _, err = c.Registry.Get(ctx, c.Slot); err != nil {
			return p, err
		}
		p.Adopted = true
	}
	if err := checkRecord(c.Slot, info, rec, c.System); err != nil {
		return p, err
	}
	if rec.Stop.Stopped() {
		// Putting the cause right does not make the slot deliver what it could not. The rows are in
		// the outbox table, and only walbox recover republishes them.
		return p, &StopRecorded{Slot: c.Slot, Stop: rec.Stop}
	}
	if info.Active {
		pid := "?"
		if info.ActivePID != nil {
			pid = fmt.Sprint(*info.ActivePID)
		}
		return p, fmt.Errorf("%w: slot %s is streaming to pid %s", ErrSlotActive, c.Slot, pid)
	}
	if p.MadeFailover, err = makeFailover(ctx, c.Conn, c.Slot, c.Failover, info.Failover || info.Synced); err != nil {
		return p, err
	}
	p.Recorded = rec.ConfirmedLSN
	return p, nil
}

// checkRecord compares an existing slot with its record.
func checkRecord(slot string, info inspect.Slot, rec registry.Record, sys pglogrepl.IdentifySystemResult) error {
	if rec.SystemID != sys.SystemID {
		return refused{fmt.Errorf("%w: slot %s was recorded on the server with system identifier %s, but this server is %s "+
			"(a restore or a new cluster); rows committed on the old server after %s may never have been relayed. Run `walbox recover`",
			ErrSlotGap, slot, rec.SystemID, sys.SystemID, rec.ConfirmedLSN)}
	}
	if info.ConfirmedFlush > rec.ConfirmedLSN {
		return refused{fmt.Errorf("%w: slot %s is at %s, ahead of %s, the last position walbox recorded (at %s): it was recreated or "+
			"advanced behind walbox's back, and rows committed in between may have been skipped. Run `walbox recover`",
			ErrSlotGap, slot, info.ConfirmedFlush, rec.ConfirmedLSN, rec.ConfirmedAt.UTC().Format(time.RFC3339))}
	}
	return nil
}

// create creates the missing slot, which is allowed only because nothing was ever recorded for
// it, and records it.
func create(ctx context.Context, c PrepareConfig) (Prepared, error) {
	if !c.Create {
		return Prepared{}, refused{fmt.Errorf("%w: slot %s; run `walbox migrate` to create it", ErrSlotMissing, c.Slot)}
	}
	lsn, err := Create(ctx, c.Conn, c.Primary, c.Slot, c.Failover)
	if IsSettingError(err) {
		err = refused{err}
	}
	if err != nil {
		return Prepared{}, err
	}
	killpoint.Hit("run.created")
	rec := registry.Record{Slot: c.Slot, SystemID: c.System.SystemID, Timeline: c.System.Timeline, Origin: registry.OriginCreated,
		CreatedLSN: lsn, ConfirmedLSN: lsn, ConfirmedXmin: c.Xmin(lsn)}
	added, err := c.Registry.Register(ctx, rec)
	if err != nil {
		return Prepared{}, err
	}
	if !added {
		return Prepared{}, refused{fmt.Errorf("%w: slot %s was recorded by another process while this one created it", ErrSlotGap, c.Slot)}
	}
	return Prepared{Slot: inspect.Slot{Name: c.Slot, Exists: true, Plugin: "pgoutput", Type: "logical", Database: c.System.DBName, ConfirmedFlush: lsn},
		Recorded: lsn, Created: true}, nil
}
