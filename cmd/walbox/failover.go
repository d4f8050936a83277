package main

import (
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/replication"
)

// addFailoverSlot adds --failover-slot to a command that creates or checks slots.
func (c *common) addFailoverSlot() {
	c.failoverSlot = c.s.add("failover-slot", "WALBOX_FAILOVER_SLOT", "auto",
		"make the slots walbox creates failover slots, which a standby with sync_replication_slots keeps for a promotion: "+
			"auto (PostgreSQL 17 and later), on (refused before 17) or off")
}

// failover reads --failover-slot; auto for a command without it.
func (c *common) failover() (replication.FailoverSlot, error) {
	if c.failoverSlot == nil {
		return replication.FailoverAuto, nil
	}
	f, err := replication.ParseFailoverSlot(c.failoverSlot.value)
	if err != nil {
		return "", badSetting(c.failoverSlot, "%v", err)
	}
	return f, nil
}

// failover is c's --failover-slot, read once without error before.
func failover(c *common) replication.FailoverSlot {
	f, _ := c.failover()
	return f
}

// addReplicationURL adds --replication-url to a command that streams from, creates or checks the
// slot.
func (c *common) addReplicationURL() {
	c.replicationURL = c.s.add("replication-url", "WALBOX_REPLICATION_URL", "",
		"a hot standby of --database-url's server (PostgreSQL 16+) to decode on: its slot is streamed from (and created there), "+
			"while the record and the checks stay on --database-url, the primary; empty: stream from --database-url")
}

// replicationDSN returns --replication-url with the database password applied; "" when not set.
func (c *common) replicationDSN() (string, error) {
	if c.replicationURL == nil || c.replicationURL.value == "" {
		return "", nil
	}
	dsn, err := withPGPassword(c.replicationURL.value, c.databasePassword.value)
	if err != nil {
		return "", badSetting(c.databasePassword, "%v", err)
	}
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		return "", badSetting(c.replicationURL, "%s", redact.Text(err.Error(), c.secrets()...))
	}
	return dsn, nil
}
