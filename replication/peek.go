package replication

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/wire"
)

// PeekConfig names a relay's slot and what it relays, as Config does, for PeekSkipped.
type PeekConfig struct {
	Slot, Publication string
	Mappings          []wire.Mapping
	// MessagePrefix is the relayed prefix of logical decoding messages, "" for none.
	MessagePrefix string
	// Shards and Shard are the relay's shard, if Shards is above 1.
	Shards, Shard int
	// Upto is the commit LSN of the last transaction to peek: the stream's last row's.
	Upto uint64
}

// RowCheck is given each row a relay would publish, with its position, in commit order. It returns
// past once the row lies after the rows it checks; the peek then stops.
type RowCheck func(timeline int32, commitLSN uint64, index int, m *wire.Message) (past bool, err error)

// PeekSkipped hands check the rows a relay would publish from the slot, up to cfg.Upto. It reads
// them with pg_logical_slot_peek_binary_changes, with the relay's pgoutput options; the slot stays
// where it is. Positions and decoding are the relay's (stream.handleWAL). The connection conn is a
// replication connection to the server of the slot. A slot streaming now is ErrSlotActive: the
// relay checks the rows itself. The role needs REPLICATION, as walbox run's.
func PeekSkipped(ctx context.Context, conn *pgconn.PgConn, cfg PeekConfig, check RowCheck) error {
	o, err := serverOrigin(ctx, conn)
	if err != nil {
		return err
	}
	if err := slotIdle(ctx, conn, cfg.Slot); err != nil {
		return err
	}
	dec := decoder.New(cfg.Mappings...).WithMessagePrefix(cfg.MessagePrefix)
	dec.SetOrigin(o)
	p := peek{cfg: &cfg, dec: dec, origin: o, check: check}
	return p.run(ctx, conn)
}

// slotIdle returns ErrSlotActive when a session streams from the slot.
func slotIdle(ctx context.Context, conn *pgconn.PgConn, slot string) error {
	res, err := conn.Exec(ctx, "SELECT active FROM pg_catalog.pg_replication_slots WHERE slot_name = "+
		quoteLiteral(slot)).ReadAll()
	if err != nil {
		return fmt.Errorf("read slot %s: %w", slot, err)
	}
	if len(res) == 1 && len(res[0].Rows) == 1 && string(res[0].Rows[0][0]) == "t" {
		return fmt.Errorf("%w: slot %s", ErrSlotActive, slot)
	}
	return nil
}

// peek is one PeekSkipped: the decoder and the position of the row read last.
type peek struct {
	cfg    *PeekConfig
	dec    *decoder.Decoder
	origin decoder.Origin
	check  RowCheck
	final  pglogrepl.LSN // the commit LSN of the transaction being read
	commit time.Time     // and its commit time
	index  int           // the index of its next row or emitted message
	past   bool
	failed error // the check's error, returned as it is
}

func (p *peek) run(ctx context.Context, conn *pgconn.PgConn) error {
	args := []string{"'proto_version'", "'1'", "'publication_names'", quoteLiteral(quoteIdent(p.cfg.Publication))}
	if p.cfg.MessagePrefix != "" || slots.ServerMajor(conn) >= 14 {
		args = append(args, "'messages'", "'true'") // as askMessages, for a Positioner
	}
	upto := pglogrepl.LSN(p.cfg.Upto + 1) // decoding stops once a record ends past it
	sql := fmt.Sprintf("SELECT lsn::text, data FROM pg_catalog.pg_logical_slot_peek_binary_changes(%s, %s::pg_catalog.pg_lsn, NULL, %s)",
		quoteLiteral(p.cfg.Slot), quoteLiteral(upto.String()), strings.Join(args, ", "))
	qctx, stop := cancelWhenDone(ctx, conn)
	defer stop()
	mr := conn.Exec(qctx, sql)
	defer mr.Close() //nolint:errcheck // the error is read below
	var err error
	for mr.NextResult() {
		rr := mr.ResultReader()
		for err == nil && !p.past && rr.NextRow() {
			err = p.handle(rr.Values())
		}
		if _, cerr := rr.Close(); err == nil && cerr != nil {
			err = classify(cerr, p.cfg.Slot)
		}
	}
	if cerr := mr.Close(); err == nil && cerr != nil {
		err = classify(cerr, p.cfg.Slot)
	}
	switch {
	case p.failed != nil:
		return p.failed
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("peek slot %s: %w", p.cfg.Slot, context.Cause(ctx))
	case err != nil:
		return fmt.Errorf("peek slot %s: %w", p.cfg.Slot, err)
	}
	return nil
}

// cancelGrace bounds the wait for the server's answer to a cancel request.
const cancelGrace = 5 * time.Second

// cancelWhenDone returns the context of a query on conn, which outlives ctx by cancelGrace at most.
// When ctx ends, it asks the server to cancel the query. The server holds the slot while it
// decodes, and does not notice a client gone. So the peek returns once the server freed the slot.
func cancelWhenDone(ctx context.Context, conn *pgconn.PgConn) (context.Context, func()) {
	qctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		time.AfterFunc(cancelGrace, cancel) // a server that does not answer
		cctx, done := context.WithTimeout(qctx, cancelGrace)
		defer done()
		_ = conn.CancelRequest(cctx) // no answer either way: the query's error says what happened
	})
	return qctx, func() {
		stop()
		cancel()
	}
}

// handle decodes one change, a row (lsn, data) of the peek, as stream.handleWAL does.
func (p *peek) handle(row [][]byte) error {
	if len(row) != 2 {
		return errors.New("want two columns")
	}
	lsn, err := pglogrepl.ParseLSN(string(row[0]))
	if err != nil {
		return err
	}
	data, err := hex.DecodeString(strings.TrimPrefix(string(row[1]), `\x`))
	if err != nil {
		return fmt.Errorf("data at %s: %w", lsn, err)
	}
	ev, err := p.dec.Decode(lsn, data)
	if decoder.IsBadRow(err) {
		p.index++ // parked, not stored
		return nil
	}
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	switch ev.Kind {
	case decoder.KindBegin:
		p.final, p.index, p.commit = ev.FinalLSN, 0, ev.CommitTime
	case decoder.KindRow:
		index := p.index
		p.index++
		if !owns(ev.Table, &ev.Message, p.cfg.Shards, p.cfg.Shard) {
			return nil
		}
		ev.Message.CommitTime = p.commit
		if ev.Message.DeliverAt.After(p.commit) {
			return nil // parked or scheduled (stream.schedule), not published in commit order
		}
		p.past, p.failed = p.check(p.origin.TimelineAt(p.final), uint64(p.final), index, &ev.Message)
		return p.failed
	case decoder.KindOtherMessage:
		p.index++
	}
	return nil
}

// owns reports whether the relay of shard sh of shards publishes m, of table. The table of an
// emitted message is "" (see stream.owns). A canary is the decoding relay's own: the decoder
// passes only its slot's. It carries the canary's routing key, which no emitted message does.
func owns(table string, m *wire.Message, shards, sh int) bool {
	return table != "" || shards <= 1 || m.RoutingKey == wire.CanaryEventType || shard.Of(m.AggregateID, shards) == sh
}
