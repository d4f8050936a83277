package replication

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// silenceBound returns how long the relay lets the server stay silent, having asked it to reply,
// before it takes the replication connection for dead, given the server's wal_sender_timeout
// (wst; zero or less when off) and the status interval, and whether a configured bound was
// raised.
//
// A live walsender that decodes a large transaction of tables outside the publication reads
// the relay's replies, and so answers a request for one, only once half of wal_sender_timeout
// passed since the last reply it read: the bound is never below wst/2 plus a status interval.
// By default it is three quarters of wal_sender_timeout: above that floor, and below the time
// after which the server drops a silent client and lets a standby take the slot, so that on a
// silent partition this relay gives up first.
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

// setupTimeout bounds a session's setup (connecting, the checks, the slot, the broker and
// START_REPLICATION) as streaming is bounded: by the silence bound of the last session, or
// before the first, by the configured ServerTimeout or else a minute (the default
// wal_sender_timeout). A silent partition during setup would otherwise hold the relay until
// TCP gives up.
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
