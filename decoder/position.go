package decoder

import (
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
)

// PositionNamespace is the UUID namespace of position ids (wire.IDFromPosition).
const PositionNamespace = "5d0c4f7e-3b1a-4e59-9a8e-2f6b7c1d0e93"

var positionNamespace = uuid.MustParse(PositionNamespace)

// PositionID is the message id of a row, with no system or timeline. The row is insert number
// ordinal (from 0) of the transaction whose commit record is at finalLSN. That is Begin's FinalLSN.
// The id is the version 5 UUID (uuid.NewSHA1) of "<finalLSN>/<ordinal>", in PositionNamespace. An
// example is "16/B374D848/0". Every insert of the transaction counts, whatever its table. So two
// tables with position ids never share one. A relay names its origin too: see Origin.PositionID.
func PositionID(finalLSN pglogrepl.LSN, ordinal int) uuid.UUID {
	// uuid.NewSHA1, without its allocations: this runs for every row.
	var buf [len(positionNamespace) + 40]byte
	b := append(buf[:0], positionNamespace[:]...)
	return positionUUID(appendPosition(b, finalLSN, ordinal))
}

// appendHex appends v in upper-case hex, as pglogrepl.LSN.String writes it.
func appendHex(b []byte, v uint64) []byte {
	start := len(b)
	b = strconv.AppendUint(b, v, 16)
	for i := start; i < len(b); i++ {
		if c := b[i]; c >= 'a' && c <= 'f' {
			b[i] = c - 'a' + 'A'
		}
	}
	return b
}
