package publisher

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/wire"
)

// recheckMissing is how long a session takes an exchange found missing to stay missing. Until then,
// rows for it are refused without asking the broker again. An exchange created in the meantime is
// used from then on.
var recheckMissing = 5 * time.Second

// maxExchangeVerdicts bounds the verdicts a session keeps; beyond it they are forgotten.
const maxExchangeVerdicts = 4096

// exchangeVerdict is what a session found out about an exchange a row names.
type exchangeVerdict struct {
	missing error     // nil: the exchange exists
	at      time.Time // when it was found missing
}

// exchangeFor returns the exchange m goes to. That is its own, once the broker has confirmed that
// it exists, or else the session's.
func (s *Session) exchangeFor(ctx context.Context, m *wire.Message) (string, error) {
	if m.Exchange == "" || m.Exchange == s.cfg.Exchange {
		return s.cfg.Exchange, nil
	}
	if v, ok := s.exchanges[m.Exchange]; ok && (v.missing == nil || time.Since(v.at) < recheckMissing) {
		return m.Exchange, v.missing
	}
	missing, err := s.checkExchange(ctx, m.Exchange)
	if err != nil {
		return "", err
	}
	if len(s.exchanges) >= maxExchangeVerdicts {
		clear(s.exchanges)
	}
	s.exchanges[m.Exchange] = exchangeVerdict{missing: missing, at: time.Now()}
	return m.Exchange, missing
}

// checkExchange asks the broker whether exchange exists, with a passive declare on a channel of its
// own. Publishing to a missing exchange would close the session's channel. It returns an error
// wrapping ErrInvalidMessage as missing if the broker refuses the name. The broker refuses it with
// 404 NOT_FOUND, or any other channel-level refusal a publish would get. The result err means the
// check itself failed, which ends the session. Either ctx ended while waiting for a blocked
// connection, or the connection failed.
func (s *Session) checkExchange(ctx context.Context, exchange string) (missing, err error) {
	if err := s.failure(); err != nil {
		return nil, err
	}
	if err := s.waitUnblocked(ctx); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil { // the watch below would cut at once
		return nil, err
	}
	// amqp091 calls ignore ctx: should the broker stop answering, cut the connection, as send does.
	stop := context.AfterFunc(ctx, func() {
		s.fail(fmt.Errorf("%w: exchange check interrupted: %w", ErrClosed, ctx.Err()))
		s.cut()
	})
	defer stop()
	err = s.declarePassive(exchange)
	var ae *amqp.Error
	switch {
	case err == nil:
		return nil, nil
	case errors.As(err, &ae) && ae.Server && ae.Code == amqp.NotFound:
		return fmt.Errorf("%w: exchange %q does not exist (%s)", ErrInvalidMessage, exchange, ae.Reason), nil
	case errors.As(err, &ae) && ae.Server && ae.Recover:
		return fmt.Errorf("%w: exchange %q: %s", ErrInvalidMessage, exchange, ae.Reason), nil
	}
	if f := s.failure(); f != nil {
		return nil, f
	}
	s.fail(fmt.Errorf("%w: check exchange %q: %w", ErrClosed, exchange, err))
	s.cut()
	return nil, s.failure()
}

// declarePassive declares exchange passively on a new channel. The broker closes the channel if
// the exchange does not exist; otherwise it is closed here.
func (s *Session) declarePassive(exchange string) error {
	ch, err := s.conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.ExchangeDeclarePassive(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return err
	}
	return ch.Close()
}
