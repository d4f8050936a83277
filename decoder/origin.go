package decoder

import (
	"crypto/sha1"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
)

// Origin says which WAL a position belongs to. The same LSN may mean another transaction on another
// database system (a new initdb). Or it may mean one on another timeline of the same system. A
// failover to a standby starts a timeline, and so does a point-in-time recovery. Both reuse the
// LSNs after the timeline's switch point. IDENTIFY_SYSTEM gives the system identifier and the
// current timeline. TIMELINE_HISTORY gives the switch points.
type Origin struct {
	SystemID uint64
	Timeline int32 // the server's current timeline
	// History lists the earlier timelines of this one, oldest first: WAL before End was written
	// on Timeline.
	History []TimelineEnd
}

// TimelineEnd is one line of a timeline history file: Timeline ended at End.
type TimelineEnd struct {
	Timeline int32
	End      pglogrepl.LSN
}

// SetOrigin makes position ids (wire.IDFromPosition) name o's system and the timeline of each
// transaction's commit LSN.
func (d *Decoder) SetOrigin(o Origin) { d.origin = o }

// TimelineAt returns the timeline on which the WAL at lsn was written.
func (o *Origin) TimelineAt(lsn pglogrepl.LSN) int32 {
	for _, h := range o.History {
		if lsn < h.End {
			return h.Timeline
		}
	}
	return o.Timeline
}

// PositionID is the message id of a row on o's system. The row is insert number ordinal (from 0) of
// a transaction. Its commit record is at finalLSN, and it committed at commitTime. The id is
// the version 5 UUID, in PositionNamespace, of "<system id>/<timeline>/<finalLSN>/<commit time>/<ordinal>".
// An example is "7301234567890123456/1/16/B374D848/817617600123456/0". The timeline is the one
// finalLSN was written on. The commit time is in microseconds since 2000-01-01 00:00 UTC, the
// PostgreSQL epoch, as pgoutput's Begin sends it. The zero Origin gives PositionID's ids, without
// system, timeline and commit time. The server sends a transaction again exactly as before, so the
// id is the same on every replay. A transaction of another system or timeline at the same LSN gets
// another id. A data directory restored from a plain copy keeps its system and timeline. A later
// transaction of it at the same LSN still gets another id, since it commits later.
func (o *Origin) PositionID(finalLSN pglogrepl.LSN, commitTime time.Time, ordinal int) uuid.UUID {
	if o.SystemID == 0 && o.Timeline == 0 {
		return PositionID(finalLSN, ordinal)
	}
	var buf [len(positionNamespace) + 96]byte
	b := append(buf[:0], positionNamespace[:]...)
	b = strconv.AppendUint(b, o.SystemID, 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(o.TimelineAt(finalLSN)), 10)
	b = append(b, '/')
	b = appendLSN(b, finalLSN)
	b = append(b, '/')
	b = strconv.AppendInt(b, commitTime.UnixMicro()-microsecFromUnixEpochToY2K, 10)
	b = append(b, '/')
	return positionUUID(strconv.AppendInt(b, int64(ordinal), 10))
}

// appendPosition appends "<finalLSN>/<ordinal>".
func appendPosition(b []byte, finalLSN pglogrepl.LSN, ordinal int) []byte {
	b = append(appendLSN(b, finalLSN), '/')
	return strconv.AppendInt(b, int64(ordinal), 10)
}

// appendLSN appends lsn as pglogrepl.LSN.String writes it.
func appendLSN(b []byte, lsn pglogrepl.LSN) []byte {
	b = appendHex(b, uint64(lsn)>>32)
	b = append(b, '/')
	return appendHex(b, uint64(lsn)&0xffffffff)
}

// positionUUID returns the version 5 UUID of name, which starts with the namespace's bytes.
func positionUUID(name []byte) uuid.UUID {
	sum := sha1.Sum(name)
	var id uuid.UUID
	copy(id[:], sum[:])
	id[6] = id[6]&0x0f | 0x50 // version 5
	id[8] = id[8]&0x3f | 0x80 // RFC 4122 variant
	return id
}
