package shard

import (
	"fmt"

	"github.com/walbox/walbox/wire"
)

// OneTable refuses a configuration that relays other tables beside table. A set of shards splits
// that one table, and its publications publish nothing else. So the set's relays would relay none
// of the others.
func OneTable(table wire.Table, tables []wire.Table) error {
	for _, t := range tables {
		if t != table {
			return fmt.Errorf("the configuration relays %s beside %s, but a set of shards splits %s alone: "+
				"its relays would not relay %s. Relay it with a configuration (slot and publication) of its own", t, table, table, t)
		}
	}
	return nil
}
