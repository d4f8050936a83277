package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// reader is the goroutine that reads the replication connection.
// It queues a copy of the data of every CopyData message the server sends, in order.
// The stream's goroutine takes them.
// The reader touches nothing else.
// It never writes to the connection (the reporter sends every status update).
// It never sees the stream's state.
// It reads on while the stream waits for a confirm or for the broker.
// So the stream selects on WAL, confirms and its context at once, and sees at once a connection that ends.
//
// Reading from a pgconn in one goroutine while another sends status updates is safe.
// A status update writes straight to the socket and shares no state with a receive (sendStatus).
//
// The queue is bounded: maxQueued messages, maxQueuedBytes.
// When it is full, the reader stops reading until the stream takes from it.
// The server's silence is not judged meanwhile (see listening).
//
// A large frame (lendFrame bytes or more: a large row) is not copied.
// The reader lends the connection's own buffer, which the next receive reuses.
// It reads nothing more until the stream gives it back (giveBack).
// The decoder's payload shares it too.
// So a large row is in memory once.
// However many large rows wait in the slot, only one is read at a time.
type reader struct {
	conn   *pgconn.PgConn
	slot   string
	heard  *heardClock
	onFail func(error) // called on the reader's goroutine when reading ends in an error
	block  []byte      // where the next copy goes (copyFrame); the reader goroutine's own

	ready  chan struct{} // has a token while the queue has frames or the reader has failed
	failed chan struct{} // closed when reading has ended; err says why
	done   chan struct{} // closed when the goroutine has returned

	mu      sync.Mutex
	room    *sync.Cond // signalled when the stream takes from the queue, gives back a lent frame, or on stop
	queue   []frame
	bytes   int
	full    bool // waiting for room, or for a lent frame: the server is not being read
	lent    bool // a lent frame is out: the connection's buffer is not to be reused
	stopped bool
	err     error
}

// frame is the data of one CopyData message, and when the reader read it from the connection.
// That time is before any wait for room in the queue.
// A lent frame's data is the connection's buffer: the stream gives it back once done with it.
type frame struct {
	data []byte
	read time.Time
	lent bool
}

// Bounds of what the reader queues for the stream.
// Beyond them, a large transaction read while the stream waits for confirms stays in the server's socket buffer.
// It does not stay in memory.
const (
	maxQueued      = 4096
	maxQueuedBytes = 16 << 20
	// frameBlock is the size of the blocks copyFrame copies frames into; larger frames get an
	// allocation of their own.
	frameBlock = 64 << 10
	// lendFrame is the size from which a frame is lent rather than copied.
	lendFrame = 1 << 20
)

func startReader(conn *pgconn.PgConn, slot string, heard *heardClock, onFail func(error)) *reader {
	r := &reader{conn: conn, slot: slot, heard: heard, onFail: onFail, ready: make(chan struct{}, 1),
		failed: make(chan struct{}), done: make(chan struct{})}
	r.room = sync.NewCond(&r.mu)
	go r.run()
	return r
}

func (r *reader) run() {
	defer close(r.done)
	for {
		f, err := r.receive()
		if err == nil && f.data == nil {
			continue // a notice
		}
		if !r.put(f, err) || (f.lent && !r.awaitReturn()) {
			return
		}
	}
}

// receive reads the next message; nil data and nil error for a notice.
func (r *reader) receive() (frame, error) {
	msg, err := r.conn.ReceiveMessage(context.Background())
	if err != nil {
		if pgconn.Timeout(err) && r.isStopped() {
			return frame{}, errReaderStopped
		}
		return frame{}, fmt.Errorf("receive: %w", classify(err, r.slot))
	}
	f := frame{read: time.Now()}
	f.data, err = copyData(msg, r.slot)
	switch {
	case len(f.data) >= lendFrame:
		f.lent = true // valid until the next receive, which waits for it
	case f.data != nil:
		f.data = r.copyFrame(f.data) // the message is valid until the next receive
	}
	return f, err
}

// awaitReturn waits until the stream gives back the lent frame, and reports whether to read on.
func (r *reader) awaitReturn() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.lent && !r.stopped {
		r.full = true
		r.room.Wait()
	}
	if r.full {
		// Nothing was read meanwhile: the silence measured from here is the server's.
		r.heard.note()
		r.full = false
	}
	return !r.stopped
}

// giveBack ends the loan of a lent frame: the stream no longer uses its data.
func (r *reader) giveBack() {
	r.mu.Lock()
	r.lent = false
	r.room.Signal()
	r.mu.Unlock()
}

// copyFrame copies data into the current block, and starts a new block when it is full.
// That is one allocation per block of small frames instead of one per frame.
// The copies never overlap: each is capped at its own length.
// A block is garbage once the stream has dropped every frame in it.
// The decoder keeps no reference into a frame.
func (r *reader) copyFrame(data []byte) []byte {
	if len(data) == 0 {
		return []byte{} // not nil, which would read as a notice
	}
	if len(data) > frameBlock/8 {
		return append(make([]byte, 0, len(data)), data...)
	}
	if cap(r.block)-len(r.block) < len(data) {
		r.block = make([]byte, 0, frameBlock)
	}
	n := len(r.block)
	r.block = append(r.block, data...)
	return r.block[n:len(r.block):len(r.block)]
}

// put queues f, or records err and ends reading. It waits while the queue is full, and reports
// whether to read on.
func (r *reader) put(f frame, err error) bool {
	r.mu.Lock()
	if err == nil {
		waited := false
		for !r.stopped && len(r.queue) > 0 && (len(r.queue) >= maxQueued || r.bytes+len(f.data) > maxQueuedBytes) {
			r.full, waited = true, true
			r.room.Wait()
		}
		if waited {
			// Nothing was read while full: the silence measured from here is the server's.
			r.heard.note()
			r.full = false
		}
		if r.stopped {
			r.mu.Unlock()
			return false
		}
		r.queue = append(r.queue, f)
		r.bytes += len(f.data)
		if f.lent {
			r.lent = true
		}
		r.mu.Unlock()
		r.signal()
		return true
	}
	stopped := r.stopped
	r.err = err
	close(r.failed)
	r.mu.Unlock()
	if !stopped {
		r.onFail(err)
	}
	r.signal()
	return false
}

func (r *reader) signal() {
	select {
	case r.ready <- struct{}{}:
	default:
	}
}

// take moves every queued frame to the end of into and returns it.
// Once nothing is left before it, it returns the error that ended reading.
// The channel ready then has a token for that error.
func (r *reader) take(into []frame) ([]frame, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	into = append(into, r.queue...)
	clear(r.queue)
	r.queue, r.bytes = r.queue[:0], 0
	r.room.Signal()
	if len(into) > 0 {
		if r.err != nil {
			// The failure's own signal may have found the frames' token there: leave one.
			// Otherwise the stream, having handled these, would wait on ready for ever.
			r.signal()
		}
		return into, nil
	}
	return into, r.err
}

// failure returns the error that ended reading, once failed is closed.
func (r *reader) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// listening reports whether the reader is reading the server, rather than waiting for room.
func (r *reader) listening() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.full
}

func (r *reader) isStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

// stop ends the reader and waits for it.
// A read deadline in the past wakes a read in progress, and pgconn survives it.
// The connection is the stream's again afterwards.
func (r *reader) stop() {
	r.mu.Lock()
	r.stopped = true
	r.room.Broadcast()
	r.mu.Unlock()
	_ = r.conn.Conn().SetReadDeadline(time.Now())
	<-r.done
	_ = r.conn.Conn().SetReadDeadline(time.Time{})
}

var errReaderStopped = errors.New("reader stopped")

// copyData returns the data of a CopyData message from the server.
// It returns nil and no error for a notice.
// It returns an error for anything else, which ends the stream.
func copyData(msg pgproto3.BackendMessage, slot string) ([]byte, error) {
	switch msg := msg.(type) {
	case *pgproto3.CopyData:
		if msg.Data == nil {
			return []byte{}, nil // empty, but not a notice: handleCopyData refuses it
		}
		return msg.Data, nil
	case *pgproto3.ErrorResponse:
		return nil, fmt.Errorf("replication stream: %w", classify(pgconn.ErrorResponseToPgError(msg), slot))
	case *pgproto3.CopyDone:
		return nil, errors.New("replication stream: server ended the stream")
	case *pgproto3.NoticeResponse:
		return nil, nil
	}
	return nil, fmt.Errorf("replication stream: unexpected message %T", msg)
}
