package decoder

import (
	"bytes"
	"encoding/binary"
	"time"

	"github.com/jackc/pglogrepl"
)

// reader reads big-endian protocol fields from b with bounds checks. A read past the end returns
// zero values and makes the reader fail for good. Callers read a whole message and check ok() once,
// which keeps the message parsers short.
type reader struct {
	b      []byte
	off    int
	failed bool
}

// ok reports whether every read so far was in bounds.
func (r *reader) ok() bool { return !r.failed }

// done reports whether every read was in bounds and all of b was consumed.
func (r *reader) done() bool { return !r.failed && r.off == len(r.b) }

// take returns the next n bytes, aliasing b, or nil if fewer than n remain.
func (r *reader) take(n int) []byte {
	if r.failed || n < 0 || n > len(r.b)-r.off {
		r.failed = true
		return nil
	}
	p := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return p
}

func (r *reader) uint8() uint8 {
	if p := r.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (r *reader) uint16() uint16 {
	if p := r.take(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (r *reader) uint32() uint32 {
	if p := r.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (r *reader) uint64() uint64 {
	if p := r.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (r *reader) lsn() pglogrepl.LSN { return pglogrepl.LSN(r.uint64()) }

// bytes32 reads a uint32 length followed by that many bytes.
func (r *reader) bytes32() []byte {
	n := r.uint32()
	if uint64(n) > uint64(len(r.b)-r.off) {
		r.failed = true
		return nil
	}
	return r.take(int(n))
}

// cstring reads a NUL-terminated string, without the NUL, aliasing b.
func (r *reader) cstring() []byte {
	if r.failed {
		return nil
	}
	i := bytes.IndexByte(r.b[r.off:], 0)
	if i < 0 {
		r.failed = true
		return nil
	}
	s := r.b[r.off : r.off+i : r.off+i]
	r.off += i + 1
	return s
}

// remaining returns the number of unread bytes.
func (r *reader) remaining() int { return len(r.b) - r.off }

// microsecFromUnixEpochToY2K is the PostgreSQL epoch (2000-01-01) in Unix microseconds.
const microsecFromUnixEpochToY2K = 946684800 * 1000000

// time reads a PostgreSQL timestamp: microseconds since 2000-01-01 UTC.
func (r *reader) time() time.Time {
	us := int64(r.uint64())
	return time.UnixMicro(microsecFromUnixEpochToY2K + us).UTC()
}
