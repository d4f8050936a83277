package publisher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/wire"
)

// notifySlack is added to Window for the buffers amqp091 notifies into, so they never fill up. The
// library amqp091 drops a notification it cannot deliver within 5 s.
const notifySlack = 64

// errCloseCalled is the failure recorded by Close.
var errCloseCalled = fmt.Errorf("%w: Close called", ErrClosed)

// Session is one AMQP connection with one channel in confirm mode. It never reconnects: once it
// fails, Publish returns an error wrapping ErrClosed and the caller dials a new one.
type Session struct {
	cfg  Config
	conn *amqp.Connection
	ch   *amqp.Channel

	// Notifications registered with amqp091 before the first publish.
	acks      chan amqp.Confirmation
	returns   chan amqp.Return
	chClose   chan *amqp.Error
	connClose chan *amqp.Error
	blocks    chan amqp.Blocking

	confirms chan wire.Confirm // owned by run

	netMu  sync.Mutex
	netc   net.Conn // the TCP connection under conn, for cutting it
	netCut bool
	out    *coalescer // what amqp091 writes to: it holds the frames of a publish burst

	mu        sync.Mutex
	published uint64     // last delivery tag handed out
	unacked   []outgoing // the messages of the delivery tags after the last judged, in tag order

	blockMu sync.Mutex
	unblock chan struct{} // non-nil while the broker blocks the connection; closed on unblock

	failOnce sync.Once
	failErr  error         // the first failure; written before dead is closed
	dead     chan struct{} // closed on the first failure

	stop      chan struct{} // closed by Close to end run
	done      chan struct{} // closed when run returns
	closeOnce sync.Once
	closeErr  error

	tr tracker // owned by run

	exchanges map[string]exchangeVerdict // exchanges rows name, by name; used by Publish only

	park, alternate *sinkQueue // alternate is nil with NoExchange
}

// Dial connects to the broker, opens a channel in confirm mode and declares the exchange. The
// context ctx and Config.DialTimeout bound Dial only; the session outlives ctx.
func Dial(ctx context.Context, cfg Config) (*Session, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	uri, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	s := &Session{
		cfg:       cfg,
		confirms:  make(chan wire.Confirm, cfg.Window),
		exchanges: make(map[string]exchangeVerdict),
		dead:      make(chan struct{}),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		park:      &sinkQueue{name: cfg.ParkExchange},
	}
	if cfg.AlternateExchange != NoExchange {
		s.alternate = &sinkQueue{name: cfg.AlternateExchange}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, s.cut)
	err = s.open(ctx, uri)
	if !stop() && err == nil {
		err = errors.New("interrupted")
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("dial %s: %w", host(uri), ctx.Err())
		}
		if s.conn != nil || brokerAnswered(err) {
			err = answered{err}
		}
		s.closeConn()
		return nil, err
	}
	go s.run()
	s.retryQueues()
	return s, nil
}

// open dials and sets up the channel. All listeners are registered before the first publish.
func (s *Session) open(ctx context.Context, uri amqp.URI) error {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(s.cfg.AppID)
	conn, err := amqp.DialConfig(s.cfg.URL, amqp.Config{
		Heartbeat:       s.cfg.Heartbeat,
		TLSClientConfig: s.cfg.TLS.Clone(), // amqp091 sets ServerName on it
		Properties:      props,
		Dial:            s.dialer(ctx),
	})
	if err != nil {
		return fmt.Errorf("dial %s: %w", host(uri), redactErr(err, s.cfg.URL))
	}
	s.conn = conn
	s.connClose = conn.NotifyClose(make(chan *amqp.Error, 1))
	s.blocks = conn.NotifyBlocked(make(chan amqp.Blocking, notifySlack))
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	s.ch = ch
	s.chClose = ch.NotifyClose(make(chan *amqp.Error, 1))
	s.acks = ch.NotifyPublish(make(chan amqp.Confirmation, s.cfg.Window+notifySlack))
	s.returns = ch.NotifyReturn(make(chan amqp.Return, s.cfg.Window+notifySlack))
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm mode: %w", err)
	}
	if err := s.declare(ch); err != nil {
		return err
	}
	return s.declareQueues(ctx)
}

// declare sets up the park exchange, the alternate exchange and the exchange. Their queues are
// declareQueues': the exchanges live on every node, a classic queue on one only.
func (s *Session) declare(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(s.cfg.ParkExchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", s.cfg.ParkExchange, err)
	}
	var args amqp.Table
	if ae := s.cfg.AlternateExchange; ae != NoExchange {
		if err := ch.ExchangeDeclare(ae, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare exchange %s: %w", ae, err)
		}
		args = amqp.Table{"alternate-exchange": ae}
	}
	if err := ch.ExchangeDeclare(s.cfg.Exchange, amqp.ExchangeTopic, true, false, false, false, args); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
			return fmt.Errorf("declare exchange %s: it exists with other settings (walbox declares it durable, "+
				"topic, with alternate-exchange %q); delete it or match the alternate exchange setting: %w",
				s.cfg.Exchange, s.cfg.AlternateExchange, err)
		}
		return fmt.Errorf("declare exchange %s: %w", s.cfg.Exchange, err)
	}
	return nil
}

// dialer returns the amqp091 dial function. It keeps the net.Conn so that cut can close it. Dial
// cuts it when ctx ends, which bounds the TLS and AMQP handshakes too.
func (s *Session) dialer(ctx context.Context) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		s.netMu.Lock()
		defer s.netMu.Unlock()
		s.netc = c
		if s.netCut {
			c.Close()
		}
		s.out = newCoalescer(writeBound{Conn: c, timeout: s.cfg.WriteTimeout}, s.writeFailed)
		return s.out, nil
	}
}

// writing reports whether a write to the broker's socket is in progress.
func (s *Session) writing() bool {
	s.netMu.Lock()
	defer s.netMu.Unlock()
	return s.out != nil && s.out.writing.Load()
}

// cut closes the TCP connection under the session, which no amqp091 call can block.
func (s *Session) cut() {
	s.netMu.Lock()
	defer s.netMu.Unlock()
	s.netCut = true
	if s.netc != nil {
		s.netc.Close()
	}
}

// Publish publishes m, mandatory, and returns its sequence number. That is the delivery tag its
// Confirm will carry: 1, 2, 3… in the session. The routing key is m.Key(): m.RoutingKey, or else
// m.EventType. The exchange is m.Exchange if set, or else the configured one. A message may name an
// exchange. Before the first publish to it, the session checks that it exists. It checks on a
// channel of its own: publishing to a missing exchange would close the session's channel. It
// declares nothing for it. Call Publish from one goroutine only.
//
// Publish waits while the broker blocks the connection; ctx ends the wait. It does not count the
// messages in flight: the caller bounds them (Config.Window). An error wrapping ErrClosed means the
// session has ended. The message may or may not have reached the broker. Any other error means
// nothing was written and the session is still usable. Either ctx ended first, or the message
// cannot be published as it stands (ErrInvalidMessage). It cannot be encoded, or its exchange does
// not exist. The write itself is not bounded by ctx: the write ignores it. Config.WriteTimeout
// bounds each socket write instead. A broker that stops reading the socket gets the connection cut,
// and the session ends. If ctx ends while the message's exchange is being checked, the connection
// is cut too.
func (s *Session) Publish(ctx context.Context, m *wire.Message) (uint64, error) {
	return s.PublishAs(ctx, 0, m)
}

// PublishAs publishes m as Publish does; its Confirm carries seq instead of the delivery tag,
// unless seq is 0. Lanes numbers messages across its sessions this way. So does package schedule:
// it numbers its records among the messages.
func (s *Session) PublishAs(ctx context.Context, seq uint64, m *wire.Message) (uint64, error) {
	if m == nil {
		return 0, fmt.Errorf("publish: %w: nil", ErrInvalidMessage)
	}
	if err := checkMessage(m); err != nil {
		return 0, fmt.Errorf("publish %.255s: %w", m.AMQPMessageID(), err)
	}
	if len(m.Payload) > s.cfg.MaxMessageSize {
		return 0, fmt.Errorf("publish %s: %w: body of %d bytes exceeds the maximum of %d",
			m.AMQPMessageID(), ErrInvalidMessage, len(m.Payload), s.cfg.MaxMessageSize)
	}
	exchange, err := s.exchangeFor(ctx, m)
	if err != nil {
		return 0, fmt.Errorf("publish %s: %w", m.AMQPMessageID(), err)
	}
	msg := Publishing(m, s.cfg.AppID)
	if n, max := propertiesSize(&msg), s.conn.Config.FrameSize-frameOverhead; max > 0 && n > max {
		return 0, fmt.Errorf("publish %s: %w: properties and headers take %d bytes, more than the %d a frame "+
			"of the broker's frame_max (%d) can carry", m.AMQPMessageID(), ErrInvalidMessage, n, max, s.conn.Config.FrameSize)
	}
	tag, err := s.publish(ctx, seq, exchange, m.Key(), msg)
	if err != nil {
		return 0, fmt.Errorf("publish %s: %w", m.AMQPMessageID(), err)
	}
	return tag, nil
}

// Park publishes a message that can never be delivered as written to the park exchange. Its headers
// say why and where it came from (see ParkedPublishing). It is confirmed like any other message,
// and takes the next sequence number. While the park queue cannot be declared (its node is down),
// Park waits and tries again every second. It tells Config.OnQueue. ctx ends the wait, with nothing
// written and the session usable.
func (s *Session) Park(ctx context.Context, p *wire.Parked) (uint64, error) {
	return s.ParkAs(ctx, 0, p)
}

// ParkAs parks p as Park does; its Confirm carries seq, as for PublishAs.
func (s *Session) ParkAs(ctx context.Context, seq uint64, p *wire.Parked) (uint64, error) {
	if p == nil {
		return 0, fmt.Errorf("park: %w: nil", ErrInvalidMessage)
	}
	if err := s.awaitPark(ctx); err != nil {
		return 0, fmt.Errorf("park %.255s: %w", p.Message.AMQPMessageID(), err)
	}
	tag, err := s.publish(ctx, seq, s.cfg.ParkExchange, "", ParkedPublishing(p, s.cfg.AppID, s.cfg.MaxMessageSize))
	if err != nil {
		return 0, fmt.Errorf("park %.255s: %w", p.Message.AMQPMessageID(), err)
	}
	return tag, nil
}

func (s *Session) publish(ctx context.Context, seq uint64, exchange, key string, msg amqp.Publishing) (uint64, error) {
	if err := s.failure(); err != nil {
		return 0, err
	}
	if err := s.waitUnblocked(ctx); err != nil {
		return 0, err
	}
	return s.send(ctx, seq, exchange, key, msg)
}

// outgoing is what the session remembers of a message until its verdict. It remembers its id, to
// match a basic.return, which carries no delivery tag. It remembers the number its Confirm carries.
type outgoing struct {
	id  string
	seq uint64
	// dc is amqp091's own record of the verdict. Its confirmation stream can report a nacked tag as
	// acked. A nack that arrives before the acks of earlier tags waits to be re-sequenced. A
	// multiple ack then passes over it. dc keeps the nack. It is nil until the publish returns.
	dc *amqp.DeferredConfirmation
}

func (s *Session) waitUnblocked(ctx context.Context) error {
	s.blockMu.Lock()
	unblock := s.unblock
	s.blockMu.Unlock()
	if unblock == nil {
		return nil
	}
	select {
	case <-unblock:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.dead:
		return s.failure()
	}
}

// send writes the publish. The message is recorded under its delivery tag before the write. A
// basic.return can arrive before the write returns. ctx is not watched during the write. A write
// cut at a caller's deadline would end the session on every brief stall of flow control. Each write
// to the socket is bounded by WriteTimeout instead (see writeBound). So a large message that is
// making progress is never cut. And a broker that stopped reading ends the session.
func (s *Session) send(ctx context.Context, seq uint64, exchange, key string, msg amqp.Publishing) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.published++
	tag := s.published
	if seq == 0 {
		seq = tag
	}
	s.unacked = append(s.unacked, outgoing{id: msg.MessageId, seq: seq})
	s.mu.Unlock()

	s.out.holdFor(tag)
	dc, err := s.ch.PublishWithDeferredConfirm(exchange, key, true, false, msg)
	s.out.holding(false)
	if err == nil {
		// Written in full: the Confirm tells what became of it. Publishes come from one
		// goroutine, so this one's entry is the last, unless its verdict emptied the list.
		s.mu.Lock()
		if n := len(s.unacked); n > 0 {
			s.unacked[n-1].dc = dc
		}
		s.mu.Unlock()
		return tag, nil
	}
	s.mu.Lock()
	s.published-- // amqp091 did the same with its counter
	s.unacked = s.unacked[:len(s.unacked)-1]
	s.mu.Unlock()
	if errors.Is(err, amqp.ErrClosed) {
		s.awaitCause()
	}
	if f := s.failure(); f != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		s.cut()
		return 0, f
	}
	return 0, s.writeFailed(err)
}

// awaitCause waits a little for run to record why the broker closed the channel. The library
// amqp091 tells run after the publish saw the channel closed. The cause (a message too large, say)
// is what the caller acts on.
func (s *Session) awaitCause() {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-s.dead:
	case <-t.C:
	}
}

// writeFailed ends the session after a failed write to the socket. A failed write leaves a stream
// that cannot be resumed. It returns err as the session's failure.
func (s *Session) writeFailed(err error) error {
	s.cut()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("the broker took nothing for %v: %w", s.cfg.WriteTimeout, err)
	}
	err = fmt.Errorf("%w: %w", ErrClosed, err)
	s.fail(err)
	return err
}

// Flush is wire.Flusher's: there is nothing more to publish for now. The session then sends the
// messages that Publish and Park handed over but it still holds. It holds them to send several in
// one write. It writes at once unless, at the pace of the past calls, the next Flush is expected
// soon:
//   - within 1.75 ms of the first message held, for a group to grow;
//   - within 1.25 ms, for a message held alone. And then only every other time, or when three are
//     expected within 1.75 ms.
//
// The session writes what it holds by itself within 2.5 ms. So Flush is only to save that delay.
// Call it each time there is nothing more to publish for now. An error wraps ErrClosed: the session
// has ended. Call it from the goroutine that publishes.
func (s *Session) Flush() error { return s.write(true) }

// write writes what the session holds; soon as for coalescer.flushSoon.
func (s *Session) write(soon bool) error {
	if s.out == nil {
		return nil
	}
	err := s.out.flushSoon(soon)
	if err == nil || errors.Is(err, ErrClosed) {
		return err // a write that failed just now was reported through writeFailed already
	}
	return s.writeFailed(err) // the write that failed was an earlier one
}

// writeBound gives every write to the broker's socket its own deadline. It is WriteTimeout from
// when the write starts. A write that makes no progress for that long fails, and amqp091 then
// closes the connection. That holds however large the message, and however long it takes in all.
type writeBound struct {
	net.Conn
	timeout time.Duration
}

func (c writeBound) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// Confirms returns the broker's verdicts, one per published message in publish order. When the
// session fails, a last Confirm with Seq 0 and an error wrapping ErrClosed follows. It follows the
// verdicts that arrived before, and the channel is closed. Sequence numbers without a verdict by
// then are unknown. Close closes the channel too, dropping what was not yet read. Read it promptly:
// verdicts beyond Window wait in an unbounded queue.
func (s *Session) Confirms() <-chan wire.Confirm { return s.confirms }

// Endpoint returns the host:port of the broker the session is connected to; it carries no
// credentials.
func (s *Session) Endpoint() string { return hostOf(s.cfg.URL) }

// Blocked reports whether the broker is blocking the connection (a memory or disk alarm).
func (s *Session) Blocked() bool {
	s.blockMu.Lock()
	defer s.blockMu.Unlock()
	return s.unblock != nil
}

// Err returns the error that ended the session, wrapping ErrClosed, or nil while it is alive.
func (s *Session) Err() error { return s.failure() }

// Close ends the session: it closes the connection, and stops the internal goroutine. It waits at
// most Config.CloseTimeout for the broker before cutting the connection. It cuts it at once if the
// broker blocks the connection or a socket write is in progress. Messages without a Confirm may or
// may not have reached the broker. It is safe to call more than once and from any goroutine.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		s.fail(errCloseCalled)
		if err := s.closeConn(); err != nil {
			s.closeErr = fmt.Errorf("close: %w", err)
		}
		close(s.stop)
		<-s.done
	})
	return s.closeErr
}

// closeConn closes the AMQP connection, bounded by CloseTimeout. The deadline interrupts a publish
// stuck in a socket write too. And the timer cuts the socket whatever happens. A connection the
// broker blocks is cut at once. The broker reads nothing from it, so it would never read
// connection.close. The close would then last all of CloseTimeout. A connection with a socket write
// in progress is cut at once too: connection.close would wait behind that write. Close is then
// called from another goroutine than the publishing one, to give up.
func (s *Session) closeConn() error {
	defer s.cut()
	if s.conn == nil || s.Blocked() || s.writing() {
		return nil
	}
	t := time.AfterFunc(s.cfg.CloseTimeout+s.cfg.CloseTimeout/10, s.cut) // after the deadline
	defer t.Stop()
	err := s.conn.CloseDeadline(time.Now().Add(s.cfg.CloseTimeout))
	if err == nil || errors.Is(err, amqp.ErrClosed) || s.failure() != errCloseCalled {
		return nil // closed already, or nothing left to report: the session had failed before
	}
	return err
}

// fail records the first failure and wakes Publish.
func (s *Session) fail(err error) {
	s.failOnce.Do(func() {
		s.failErr = err
		close(s.dead)
	})
}

func (s *Session) failure() error {
	select {
	case <-s.dead:
		return s.failErr
	default:
		return nil
	}
}
