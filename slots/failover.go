package slots

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// FailoverSlot says whether the slots walbox creates are failover slots (PostgreSQL 17+). A standby
// with sync_replication_slots keeps such a slot in step. So the slot survives a promotion.
type FailoverSlot string

// The modes of FailoverSlot.
const (
	FailoverAuto FailoverSlot = "auto" // on for PostgreSQL 17 and later, off before
	FailoverOn   FailoverSlot = "on"   // on; an error on a server before 17
	FailoverOff  FailoverSlot = "off"  // never
)

// failoverSince is the first major version with failover slots.
const failoverSince = 17

// ParseFailoverSlot reads auto, on or off.
func ParseFailoverSlot(s string) (FailoverSlot, error) {
	switch f := FailoverSlot(s); f {
	case FailoverAuto, FailoverOn, FailoverOff:
		return f, nil
	case "":
		return FailoverAuto, nil
	}
	return "", fmt.Errorf("%q: want auto, on or off", s)
}

// Wanted reports whether a slot created on a server of this major version is a failover slot:
//   - FailoverOff never;
//   - FailoverAuto from PostgreSQL 17 on;
//   - FailoverOn always, and an error before 17.
func (f FailoverSlot) Wanted(major int) (bool, error) {
	switch f {
	case FailoverOff:
		return false, nil
	case FailoverOn:
		if major < failoverSince {
			return false, fmt.Errorf("failover slot on: PostgreSQL %d has no failover slots (17 and later have); "+
				"set --failover-slot auto or off, or upgrade", major)
		}
		return true, nil
	}
	return major >= failoverSince, nil
}

// MajorVersion reads the major version from a server_version such as "17.12 (Debian 17.12-1)";
// 0 when it cannot.
func MajorVersion(serverVersion string) int {
	end := strings.IndexFunc(serverVersion, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(serverVersion)
	}
	n, _ := strconv.Atoi(serverVersion[:end])
	return n
}

// ServerMajor is the major version of the server conn is connected to (MajorVersion of the
// server_version it reported).
func ServerMajor(conn *pgconn.PgConn) int {
	return MajorVersion(conn.ParameterStatus("server_version"))
}

// createdSlot is what CREATE_REPLICATION_SLOT returns.
type createdSlot struct {
	lsn      pglogrepl.LSN
	snapshot string // the exported snapshot's name, if one was asked for
}

// createLogicalSlot creates a pgoutput slot over the replication connection conn. It exports a
// snapshot if export is set. It creates a failover slot when failover says so for this server.
func createLogicalSlot(ctx context.Context, conn *pgconn.PgConn, slot string, failover FailoverSlot, export bool) (createdSlot, error) {
	on, err := failover.Wanted(ServerMajor(conn))
	if err != nil {
		return createdSlot{}, settingError{err}
	}
	if on && inRecovery(conn) {
		// A slot created on a standby cannot be a failover slot.
		if failover == FailoverOn {
			return createdSlot{}, settingError{fmt.Errorf("failover slot on: slot %s is created on a standby, where it cannot be a failover slot; "+
				"set --failover-slot auto or off", slot)}
		}
		on = false
	}
	snapshot := "nothing"
	if export {
		snapshot = "export"
	}
	opts := "SNAPSHOT '" + snapshot + "'"
	if on {
		opts += ", FAILOVER true"
	}
	var res []*pgconn.Result
	if ServerMajor(conn) >= 15 {
		// The option list exists since PostgreSQL 15; FAILOVER since 17.
		res, err = conn.Exec(ctx, fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (%s)", quoteIdent(slot), opts)).ReadAll()
	} else {
		old := map[bool]string{false: "NOEXPORT_SNAPSHOT", true: "EXPORT_SNAPSHOT"}[export]
		res, err = conn.Exec(ctx, fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput %s", quoteIdent(slot), old)).ReadAll()
	}
	if err != nil {
		return createdSlot{}, fmt.Errorf("create slot %s: %w", slot, err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) < 3 {
		return createdSlot{}, fmt.Errorf("create slot %s: unexpected result", slot)
	}
	row := res[0].Rows[0]
	lsn, err := pglogrepl.ParseLSN(string(row[1]))
	if err != nil {
		return createdSlot{}, fmt.Errorf("create slot %s: consistent point %q: %w", slot, row[1], err)
	}
	return createdSlot{lsn: lsn, snapshot: string(row[2])}, nil
}

// makeFailover turns an existing inactive slot into a failover slot when failover says so. An older
// walbox may have made the slot, or someone by hand. It reports whether it changed the slot.
func makeFailover(ctx context.Context, conn *pgconn.PgConn, slot string, failover FailoverSlot, isFailover bool) (bool, error) {
	on, err := failover.Wanted(ServerMajor(conn))
	if err != nil || !on || isFailover || inRecovery(conn) {
		return false, err
	}
	if err := conn.Exec(ctx, fmt.Sprintf("ALTER_REPLICATION_SLOT %s (FAILOVER true)", quoteIdent(slot))).Close(); err != nil {
		return false, fmt.Errorf("make slot %s a failover slot: %w", slot, classify(err, slot))
	}
	return true, nil
}

// settingError is an error of the failover setting on this server: retrying cannot fix it.
type settingError struct{ error }

func (s settingError) Unwrap() error { return s.error }

// IsSettingError reports whether err comes from a setting that does not fit the server (see
// FailoverSlot), which retrying cannot fix.
func IsSettingError(err error) bool {
	var s settingError
	return errors.As(err, &s)
}
