package relayd

import (
	"context"

	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/schedule"
	"github.com/walbox/walbox/wire"
)

// scheduling sets up scheduled delivery on dial's sessions (package schedule). Each session of the
// relay records the messages due later, over a database connection of its own. The sender sends
// them when due, over sessions of dial's of its own, while the relay holds the slot.
func (d *Daemon) scheduling(rc replication.Config, dial replication.Dialer) replication.Dialer {
	d.sender = schedule.NewSender(schedule.SenderConfig{
		DatabaseURL: rc.DatabaseURL,
		Schema:      rc.Table.Schema,
		Slot:        rc.Slot,
		Dial:        func(ctx context.Context) (wire.Publisher, error) { return dial(ctx) },
		Active:      func() bool { return d.relay.Stats().Streaming.Load() },
		Logger:      rc.Logger,
		Lateness:    d.metrics.ScheduledLateness,
	})
	d.metrics.WatchSchedule(func() float64 { return float64(d.sender.Waiting.Load()) })
	return func(ctx context.Context) (replication.Publisher, error) {
		p, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		return schedule.Wrap(ctx, p, rc.DatabaseURL, rc.Table.Schema, rc.Slot, rc.Window, d.sender.Nudge, rc.Logger)
	}
}
