package relayd

import (
	"context"
	"log/slog"

	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/replication"
)

// dialer opens the relay's sessions on the endpoints, and logs which node each one reached
// (which /status and the walbox_broker_connected metric show as well).
func dialer(eps *publisher.Endpoints, log *slog.Logger) replication.Dialer {
	return func(ctx context.Context) (replication.Publisher, error) {
		s, err := eps.Dial(ctx)
		if err != nil {
			return nil, err
		}
		log.Info("connected to broker", "broker", s.Endpoint())
		return s, nil
	}
}
