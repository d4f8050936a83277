package decoder

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/wire"
)

// Kind says what an Event carries.
type Kind uint8

const (
	// KindSkip: nothing for the caller (Relation, Type, Origin, Update, Delete, Truncate and
	// non-transactional logical decoding messages of another prefix).
	KindSkip Kind = iota
	// KindBegin: a transaction starts; FinalLSN, CommitTime and Xid are set.
	KindBegin
	// KindRow: an outbox row, or a message written by the emit function; Message is set.
	KindRow
	// KindCommit: the transaction ends; CommitLSN, EndLSN and CommitTime are set.
	KindCommit
	// KindOtherMessage: a transactional logical decoding message of another prefix (or any, with no
	// prefix set). It carries nothing for the caller. But it is one of the transaction's changes,
	// whatever the prefix. A caller that numbers them counts it (replication.Positioner).
	KindOtherMessage
)

// String returns "skip", "begin", "row", "commit" or "other message".
func (k Kind) String() string {
	switch k {
	case KindSkip:
		return "skip"
	case KindBegin:
		return "begin"
	case KindRow:
		return "row"
	case KindCommit:
		return "commit"
	case KindOtherMessage:
		return "other message"
	}
	return "unknown"
}

// Event is one decoded pgoutput message. Only the fields of its Kind are set.
type Event struct {
	Kind Kind

	// FinalLSN (KindBegin) is the LSN of the transaction's commit record, as announced by Begin.
	FinalLSN pglogrepl.LSN
	// CommitTime (KindBegin, KindCommit) is when the transaction committed, in UTC.
	CommitTime time.Time
	// Xid (KindBegin) is the transaction id.
	Xid uint32

	// Message (KindRow) is the outbox row. It shares no memory with the decoded data.
	Message wire.Message
	// Table (KindRow) is the row's table, "schema.name"; empty for an emitted message.
	Table string

	// CommitLSN (KindCommit) is the LSN of the commit record (equal to Begin's FinalLSN).
	CommitLSN pglogrepl.LSN
	// EndLSN (KindCommit) is the end of the commit record (Commit's TransactionEndLSN). It is the
	// only LSN the relay may confirm to the server.
	EndLSN pglogrepl.LSN
}

// Decoder turns pgoutput messages into Events. It caches the relations the server announces,
// so one Decoder must see every message of one replication stream, in order. It is not safe
// for concurrent use.
type Decoder struct {
	maps  []wire.Mapping
	given []wire.Mapping // as given to New: the column check tells defaults from named columns
	rels  map[uint32]*relation
	// prefix is the prefix of the logical decoding messages that are outbox messages; "" for none.
	prefix string
	// canary is the slot whose canary messages are outbox messages; "" for none (WithCanary).
	canary string
	// share: a row's payload shares the data given to Decode (WithSharedPayload).
	share bool

	// The transaction being decoded: position ids are derived from them.
	finalLSN   pglogrepl.LSN
	commitTime time.Time
	inserts    int // inserts decoded since its Begin

	origin Origin // see SetOrigin
}

// New returns a Decoder for the given outbox tables, each with its column mapping. With none given,
// the mapping is wire.Mapping{Table: wire.DefaultTable}.WithDefaults(). Each mapping is completed
// with wire.Mapping.WithDefaults. An insert into a table no mapping names is an ErrForeignTable
// error. If two mappings name one table, the first is used.
func New(maps ...wire.Mapping) *Decoder {
	if len(maps) == 0 {
		maps = []wire.Mapping{{Table: wire.DefaultTable}}
	}
	d := &Decoder{maps: make([]wire.Mapping, len(maps)), given: maps, rels: make(map[uint32]*relation)}
	for i, m := range maps {
		d.maps[i] = m.WithDefaults()
	}
	return d
}

// WithSharedPayload makes the payload of a decoded row share the data given to Decode, and returns
// d. That is Event.Message.Payload, and Error.Partial's. Decode then does not copy it. The caller
// keeps that data unchanged for as long as it uses the payload. A large row then costs its frame
// only, not its frame and a copy.
func (d *Decoder) WithSharedPayload() *Decoder {
	d.share = true
	return d
}

// Decode decodes one pgoutput (protocol version 1) message. That is the payload of one XLogData
// message, starting at the message type byte. lsn is the XLogData's WALStart. It only labels
// errors. A zero lsn is replaced by the commit LSN of the transaction being decoded. Decode never
// panics, never retains data, and every error it returns is an *Error.
func (d *Decoder) Decode(lsn pglogrepl.LSN, data []byte) (Event, error) {
	ev, err := d.decode(data)
	if err == nil {
		return ev, nil
	}
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Err: err}
	}
	if lsn == 0 {
		// The walsender sends a Relation message without a position: the transaction's commit
		// LSN names where it failed instead.
		lsn = d.finalLSN
	}
	e.LSN = lsn
	return Event{}, e
}

func (d *Decoder) decode(data []byte) (Event, error) {
	if len(data) == 0 {
		return Event{}, malformed("empty message")
	}
	r := &reader{b: data[1:]}
	switch t := data[0]; t {
	case 'B':
		return d.decodeBegin(r)
	case 'C':
		return decodeCommit(r)
	case 'I':
		return d.decodeInsert(r)
	case 'R':
		return Event{}, d.decodeRelation(r)
	case 'Y':
		return Event{}, skipType(r)
	case 'O':
		return Event{}, skipOrigin(r)
	case 'U':
		return Event{}, skipUpdate(r)
	case 'D':
		return Event{}, skipDelete(r)
	case 'T':
		return Event{}, skipTruncate(r)
	case 'M':
		return d.decodeMessage(r)
	case 'S', 'E', 'c', 'A':
		return Event{}, streamingError(t)
	default:
		return Event{}, malformed("unknown message type %q", []byte{t})
	}
}

func (d *Decoder) decodeBegin(r *reader) (Event, error) {
	ev := Event{Kind: KindBegin, FinalLSN: r.lsn(), CommitTime: r.time(), Xid: r.uint32()}
	if !r.done() {
		return Event{}, malformed("begin message of %d bytes, want 21", len(r.b)+1)
	}
	d.finalLSN, d.commitTime, d.inserts = ev.FinalLSN, ev.CommitTime, 0
	return ev, nil
}

func decodeCommit(r *reader) (Event, error) {
	r.uint8() // flags, unused
	ev := Event{Kind: KindCommit, CommitLSN: r.lsn(), EndLSN: r.lsn(), CommitTime: r.time()}
	if !r.done() {
		return Event{}, malformed("commit message of %d bytes, want 26", len(r.b)+1)
	}
	return ev, nil
}

func (d *Decoder) decodeInsert(r *reader) (Event, error) {
	relID := r.uint32()
	if tag := r.uint8(); !r.ok() || tag != 'N' {
		return Event{}, malformed("insert message without a new tuple")
	}
	rel, ok := d.rels[relID]
	if !ok {
		return Event{}, malformed("insert into relation %d, which was never announced", relID)
	}
	pos := position{finalLSN: d.finalLSN, commitTime: d.commitTime, ordinal: d.inserts, origin: &d.origin}
	d.inserts++
	var buf [16]value // on the stack: room for the columns of nearly every mapping
	var row []value
	if rel.nslots <= len(buf) {
		row = buf[:rel.nslots]
	} else {
		row = make([]value, rel.nslots)
	}
	if err := readTuple(r, rel, row); err != nil {
		return Event{}, err
	}
	if !r.done() {
		return Event{}, &Error{Table: rel.table, Err: malformed("%d trailing bytes after insert", r.remaining())}
	}
	if rel.mapping == nil {
		return Event{}, &Error{Table: rel.table, Err: ErrForeignTable}
	}
	msg, err := rel.message(row, pos, d.share)
	if err != nil {
		return Event{}, err
	}
	return Event{Kind: KindRow, Message: msg, Table: rel.table}, nil
}

func streamingError(t byte) error {
	name := map[byte]string{'S': "stream start", 'E': "stream stop", 'c': "stream commit", 'A': "stream abort"}[t]
	return fmt.Errorf("%w: %s", ErrStreaming, name)
}
