package main

import (
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
