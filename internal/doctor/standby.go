package doctor

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/pgconnect"
)

// decodingOnStandbySince is the first PostgreSQL version that decodes on a standby.
const decodingOnStandbySince = 160000

// standbyFacts are what the checks of --replication-url read from the standby.
type standbyFacts struct {
	version             string
	num                 int
	inRecovery          bool
	primary             bool   // the --database-url server itself
	feedback            string // hot_standby_feedback
	primarySlot, source string // primary_slot_name; the standby's host and port
}

// standbyChecks judges the hot standby walbox decodes on (--replication-url). It must run
// PostgreSQL 16 or later, be in recovery, and have hot_standby_feedback on. Without that, the
// primary removes catalog rows the standby's slot still needs. The slot is then invalidated. It
// reads the standby's slot into f, for the slot and record checks.
func (d doctor) standbyChecks(ctx context.Context, primary *pgx.Conn, f *pgFacts) []Check {
	if d.standby == "" {
		return nil
	}
	conn, err := pgconnect.Connect(ctx, d.standby)
	if err != nil {
		return []Check{failCheck("standby", "check --replication-url (host, port, database, user, password) and the standby's pg_hba.conf",
			"cannot connect to the standby: %v", err)}
	}
	defer conn.Close(context.Background())
	s := standbyFacts{source: hostPort(&conn.Config().Config)}
	err = conn.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version'), pg_catalog.current_setting('server_version_num')::int, pg_catalog.pg_is_in_recovery(),
			pg_catalog.current_setting('hot_standby_feedback'), pg_catalog.current_setting('primary_slot_name')`).
		Scan(&s.version, &s.num, &s.inRecovery, &s.feedback, &s.primarySlot)
	if err == nil {
		f.slot, err = inspect.ReadSlot(ctx, conn, d.slot)
	}
	if err == nil {
		s.primary, err = sameServer(ctx, primary, conn)
	}
	if err != nil {
		return []Check{failCheck("standby", "", "read the standby's settings: %v", err)}
	}
	return []Check{standbyCheck(s), feedbackCheck(s)}
}

func standbyCheck(s standbyFacts) Check {
	switch {
	case !s.inRecovery && !s.primary:
		return failCheck("standby", "point --database-url at it if it is the primary now, or --replication-url at a hot standby of "+
			"--database-url's server",
			"--replication-url: PostgreSQL %s at %s is not a standby (promoted?) and not the --database-url server: rows committed "+
				"on --database-url's server never reach its slot, and walbox run stops", s.version, s.source)
	case !s.inRecovery:
		return warnCheck("standby", "point --replication-url at a hot standby of --database-url's server, or leave it empty",
			"--replication-url: PostgreSQL %s at %s is not a standby: walbox decodes on it as on a primary", s.version, s.source)
	case s.num < decodingOnStandbySince:
		return failCheck("standby", "upgrade the standby to PostgreSQL 16 or later, or leave --replication-url empty",
			"--replication-url: PostgreSQL %s at %s cannot decode on a standby (16 and later can)", s.version, s.source)
	}
	return passCheck("standby", "--replication-url: walbox decodes on the hot standby PostgreSQL %s at %s", s.version, s.source)
}

func feedbackCheck(s standbyFacts) Check {
	if !s.inRecovery {
		return passCheck("hot_standby_feedback", "not a standby: hot_standby_feedback does not apply")
	}
	const fix = "on the standby: ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf(); and give it a physical " +
		"slot on the primary (primary_slot_name), so that the feedback holds across reconnects"
	if s.feedback != "on" {
		return failCheck("hot_standby_feedback", fix, "hot_standby_feedback = %s on the standby: the primary removes catalog rows "+
			"the standby's slot still needs, and the slot is invalidated (walbox then stops until `walbox recover`)", s.feedback)
	}
	if s.primarySlot == "" {
		return warnCheck("hot_standby_feedback", fix, "hot_standby_feedback = on, but the standby has no primary_slot_name: "+
			"while it is disconnected the primary may remove catalog rows its slot needs")
	}
	return passCheck("hot_standby_feedback", "hot_standby_feedback = on, primary_slot_name = %s: the primary keeps the catalog rows "+
		"the standby's slot needs", s.primarySlot)
}

// standbyNote is the failover_slot line when walbox decodes on a standby.
func standbyNote(slot string) Check {
	return passCheck("failover_slot", "slot %s is on the standby (--replication-url), where it cannot be a failover slot", slot)
}

// sameServer reports whether a and b are connected to the same server.
func sameServer(ctx context.Context, a, b *pgx.Conn) (bool, error) {
	ida, err := inspect.ServerIdentity(ctx, a)
	if err != nil {
		return false, err
	}
	idb, err := inspect.ServerIdentity(ctx, b)
	return ida == idb, err
}
