package cli

import (
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/slots"
)

// failover reads --failover-slot; auto for a command without it.
func (c *common) failover() (slots.FailoverSlot, error) {
	if c.failoverSlot == nil {
		return slots.FailoverAuto, nil
	}
	f, err := slots.ParseFailoverSlot(c.failoverSlot.value)
	if err != nil {
		return "", badSetting(c.failoverSlot, "%v", err)
	}
	return f, nil
}

// failover is c's --failover-slot, read once without error before.
func failover(c *common) slots.FailoverSlot {
	f, _ := c.failover()
	return f
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
