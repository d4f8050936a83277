package replication

import (
	"errors"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/decoder"
)

// An anchor is in the server's WAL when it is on the server's timeline before its WAL's end.
// It is also there on an earlier timeline of its history, before that timeline's end.
func TestAnchorGap(t *testing.T) {
	promoted := decoder.Origin{SystemID: 7, Timeline: 3, History: []decoder.TimelineEnd{{Timeline: 1, End: 0x5000}, {Timeline: 2, End: 0x9000}}}
	first := decoder.Origin{SystemID: 7, Timeline: 1}
	tests := []struct {
		name string
		tl   int32
		lsn  pglogrepl.LSN
		o    decoder.Origin
		end  pglogrepl.LSN
		gap  bool
	}{
		{"before the end of the current timeline", 1, 0x4000, first, 0x4100, false},
		{"at the end of the current timeline (a restored copy)", 1, 0x4000, first, 0x4000, true},
		{"past the end of the current timeline (a restored copy)", 1, 0x8000, first, 0x4000, true},
		{"a later timeline than the server's (an old primary brought back)", 2, 0x100, first, 0x9000, true},
		{"an earlier timeline before its end", 1, 0x4fff, promoted, 0xa000, false},
		{"an earlier timeline past its end (lost in a failover)", 2, 0x9000, promoted, 0xa000, true},
		{"on the current timeline of a promoted server", 3, 0x9500, promoted, 0xa000, false},
		{"a timeline the history does not have", 4, 0x100, decoder.Origin{Timeline: 5, History: []decoder.TimelineEnd{{Timeline: 1, End: 0x10}}}, 0xa000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := anchorGap(tt.tl, tt.lsn, tt.o, tt.end)
			if got := errors.Is(err, ErrAnchorGap); got != tt.gap {
				t.Fatalf("anchorGap: %v, want a gap: %v", err, tt.gap)
			}
			if err != nil && retryable(anchorError(err)) {
				t.Errorf("a gap is retried: %v", err)
			}
		})
	}
}
