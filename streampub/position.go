package streampub

import (
	"fmt"
	"strconv"
	"strings"
)

// The application properties that tie a stored message to its place in the WAL.
const (
	// PropProducer is the producer's name (Config.Producer).
	PropProducer = "walbox-producer"
	// PropPosition is the message's Position, as Position.String writes it.
	PropPosition = "walbox-position"
	// PropPublishingID is the message's publishing id (an int64).
	PropPublishingID = "walbox-publishing-id"
	// PropSystem is the database system identifier of the message's position, as text.
	PropSystem = "walbox-system"
)

// Position is where a message comes from: the timeline and LSN of its transaction's commit record.
// It holds the message's index among the transaction's rows too. Positions grow in commit order: a
// server commits in LSN order on a timeline. And a later timeline starts after the WAL it kept of
// the earlier one.
type Position struct {
	Timeline int32
	LSN      uint64
	Index    int
}

// less reports whether p comes before q.
func (p Position) less(q Position) bool {
	if p.Timeline != q.Timeline {
		return p.Timeline < q.Timeline
	}
	if p.LSN != q.LSN {
		return p.LSN < q.LSN
	}
	return p.Index < q.Index
}

// String writes p as "<timeline>/<LSN>/<index>", the LSN as PostgreSQL writes it:
// "1/16/B374D848/0".
func (p Position) String() string {
	return fmt.Sprintf("%d/%X/%X/%d", p.Timeline, p.LSN>>32, uint32(p.LSN), p.Index)
}

// parsePosition reads what String wrote.
func parsePosition(s string) (Position, error) {
	f := strings.Split(s, "/")
	if len(f) != 4 {
		return Position{}, fmt.Errorf("position %q: want timeline/LSN/index", s)
	}
	tl, err1 := strconv.ParseInt(f[0], 10, 32)
	hi, err2 := strconv.ParseUint(f[1], 16, 32)
	lo, err3 := strconv.ParseUint(f[2], 16, 32)
	idx, err4 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || idx < 0 {
		return Position{}, fmt.Errorf("position %q: want timeline/LSN/index", s)
	}
	return Position{Timeline: int32(tl), LSN: hi<<32 | lo, Index: idx}, nil
}
