package decoder_test

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pglogrepl"
)

// Hand-built pgoutput (protocol version 1) messages, as the server sends them.

// Type OIDs used in relation messages.
const (
	oidText        = 25
	oidJSON        = 114
	oidUUID        = 2950
	oidTimestamptz = 1184
	oidJSONB       = 3802
)

// col is a relation column.
type col struct {
	name string
	oid  uint32
}

// outboxCols are the columns of the default outbox table, in its order.
var outboxCols = []col{
	{"id", oidUUID}, {"aggregate_type", oidText}, {"aggregate_id", oidText}, {"event_type", oidText},
	{"payload", oidJSONB}, {"headers", oidJSONB}, {"created_at", oidTimestamptz},
}

// val is a tuple column: kind 'n' (NULL), 't' (text), 'u' (unchanged TOAST) or 'b' (binary).
type val struct {
	kind byte
	data string
}

func text(s string) val { return val{kind: 't', data: s} }

var null = val{kind: 'n'}

type msg []byte

func (m msg) u8(v byte) msg      { return append(m, v) }
func (m msg) u16(v uint16) msg   { return binary.BigEndian.AppendUint16(m, v) }
func (m msg) u32(v uint32) msg   { return binary.BigEndian.AppendUint32(m, v) }
func (m msg) u64(v uint64) msg   { return binary.BigEndian.AppendUint64(m, v) }
func (m msg) str(s string) msg   { return append(append(m, s...), 0) }
func (m msg) lsn(l uint64) msg   { return m.u64(l) }
func (m msg) ts(t time.Time) msg { return m.u64(uint64(t.UnixMicro() - 946684800*1000000)) }

func (m msg) tuple(vals []val) msg {
	m = m.u16(uint16(len(vals)))
	for _, v := range vals {
		m = m.u8(v.kind)
		if v.kind == 't' || v.kind == 'b' {
			m = append(m.u32(uint32(len(v.data))), v.data...)
		}
	}
	return m
}

func beginMsg(final pglogrepl.LSN, t time.Time, xid uint32) []byte {
	return msg{'B'}.lsn(uint64(final)).ts(t).u32(xid)
}

func commitMsg(commit, end pglogrepl.LSN, t time.Time) []byte {
	return msg{'C'}.u8(0).lsn(uint64(commit)).lsn(uint64(end)).ts(t)
}

func relationMsg(id uint32, schema, name string, cols []col) []byte {
	m := msg{'R'}.u32(id).str(schema).str(name).u8('d').u16(uint16(len(cols)))
	for i, c := range cols {
		flags := byte(0)
		if i == 0 {
			flags = 1 // part of the key
		}
		m = m.u8(flags).str(c.name).u32(c.oid).u32(0xffffffff)
	}
	return m
}

func insertMsg(relID uint32, vals ...val) []byte {
	return msg{'I'}.u32(relID).u8('N').tuple(vals)
}

func updateMsg(relID uint32, old []val, vals ...val) []byte {
	m := msg{'U'}.u32(relID)
	if old != nil {
		m = m.u8('O').tuple(old)
	}
	return m.u8('N').tuple(vals)
}

func deleteMsg(relID uint32, key ...val) []byte {
	return msg{'D'}.u32(relID).u8('K').tuple(key)
}

func truncateMsg(relIDs ...uint32) []byte {
	m := msg{'T'}.u32(uint32(len(relIDs))).u8(0)
	for _, id := range relIDs {
		m = m.u32(id)
	}
	return m
}

func typeMsg(oid uint32, schema, name string) []byte {
	return msg{'Y'}.u32(oid).str(schema).str(name)
}

func originMsg(lsn pglogrepl.LSN, name string) []byte {
	return msg{'O'}.lsn(uint64(lsn)).str(name)
}

func logicalMsg(transactional bool, lsn pglogrepl.LSN, prefix, content string) []byte {
	flags := byte(0)
	if transactional {
		flags = 1
	}
	return append(msg{'M'}.u8(flags).lsn(uint64(lsn)).str(prefix).u32(uint32(len(content))), content...)
}

// Values of a typical row of the default outbox table.
const (
	rowID        = "0b2c6f2e-8a51-4b6e-9d7c-3f1e2a4b5c6d"
	rowCreatedAt = "2026-11-22 07:15:24.123456+00"
)

// outboxRow returns the values of a row of the default outbox table with the given payload.
func outboxRow(payload string) []val {
	return []val{
		text(rowID), text("order"), text("42"), text("order.created"),
		text(payload), text("{}"), text(rowCreatedAt),
	}
}
