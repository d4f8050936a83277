package relayd

import (
	"context"
	"log/slog"

	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/replication"
)

// dialer opens the relay's sessions on the endpoints, and logs which node each one reached. The
// /status endpoint and the walbox_broker_connected metric show that node as well. With more than
// one lane a session is that many, one per lane. They are dialed in turn, so that they spread over
// the nodes.
func dialer(eps *publisher.Endpoints, lanes int, log *slog.Logger) replication.Dialer {
	dial := func(ctx context.Context) (*publisher.Session, error) {
		s, err := eps.Dial(ctx)
		if err != nil {
			return nil, err
		}
		log.Info("connected to broker", "broker", s.Endpoint())
		return s, nil
	}
	if lanes <= 1 {
		return func(ctx context.Context) (replication.Publisher, error) { return dial(ctx) }
	}
	return func(ctx context.Context) (replication.Publisher, error) {
		return publisher.DialLanes(ctx, lanes, dial)
	}
}
