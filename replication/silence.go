package replication

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// silenceBound returns how long the server may stay silent, having been asked to reply.
// Past it, the relay takes the replication connection for dead.
// It takes the server's wal_sender_timeout (wst; zero or less when off) and the status interval.
// It also returns whether a configured bound was raised.
//
// A live walsender may decode a large transaction of tables outside the publication.
// It then reads the relay's replies only once half of wal_sender_timeout passed since the last one it read.
// Only then does it answer a request for a reply.
// So the bound is never below wst/2 plus a status interval.
// By default it is three quarters of wal_sender_timeout, above that floor.
// That is below the time after which the server drops a silent client and lets a standby take the slot.
// So on a silent partition this relay gives up first.
func silenceBound(configured, wst, statusInterval time.Duration) (bound time.Duration, raised bool) {
	if wst <= 0 {
		wst = time.Minute // the server never drops the relay; wait as long as the default would
	}
	floor := max(wst/2+statusInterval, 3*statusInterval)
	if configured == 0 {
		return max(wst*3/4, floor), false
	}
	if configured < floor {
		return floor, true
	}
	return configured, false
}

// setupTimeout bounds a session's setup as streaming is bounded.
// Setup is connecting, the checks, the slot, the broker and START_REPLICATION.
// The bound is the silence bound of the last session.
// Before the first, it is the configured ServerTimeout, or else a minute (the default wal_sender_timeout).
// A silent partition during setup would otherwise keep the relay waiting until TCP gives up.
func (r *Relay) setupTimeout() time.Duration {
	switch {
	case r.silence > 0:
		return r.silence
	case r.cfg.ServerTimeout > 0:
		return r.cfg.ServerTimeout
	}
	return time.Minute
}

// setupExpired names the setup deadline in err when setup ctx ran out while ctx, the relay's,
// did not.
func setupExpired(ctx, setup context.Context, limit time.Duration, err error) error {
	if err == nil || ctx.Err() != nil || !errors.Is(setup.Err(), context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("session setup: %w within %v; taking the connection for dead: %w", errServerSilent, limit, err)
}

// serverSilence reads wal_sender_timeout and returns the session's silence bound, warning when
// the configured ServerTimeout is raised.
func (r *Relay) serverSilence(wst time.Duration) time.Duration {
	bound, raised := silenceBound(r.cfg.ServerTimeout, wst, r.cfg.StatusInterval)
	if raised && r.silence != bound {
		r.cfg.Logger.Warn("server timeout raised: a live server may stay silent that long while it decodes a large transaction",
			"server_timeout", r.cfg.ServerTimeout.String(), "raised_to", bound.String(), "wal_sender_timeout", wst.String())
	}
	r.silence = bound
	return bound
}
