package replication

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/decoder"
)

// readOrigin returns the server's system identifier and timeline, from IDENTIFY_SYSTEM's sys.
// It adds the timeline history.
// Position ids name it, so that they stay unique across a failover or a point-in-time recovery.
func readOrigin(ctx context.Context, conn *pgconn.PgConn, sys pglogrepl.IdentifySystemResult) (decoder.Origin, error) {
	id, err := strconv.ParseUint(sys.SystemID, 10, 64)
	if err != nil {
		return decoder.Origin{}, fmt.Errorf("identify system: system identifier %q: %w", sys.SystemID, err)
	}
	o := decoder.Origin{SystemID: id, Timeline: sys.Timeline}
	if sys.Timeline <= 1 {
		return o, nil // timeline 1 has no history
	}
	h, err := pglogrepl.TimelineHistory(ctx, conn, sys.Timeline)
	if err != nil {
		return decoder.Origin{}, fmt.Errorf("timeline history %d: %w", sys.Timeline, err)
	}
	if o.History, err = parseHistory(string(h.Content)); err != nil {
		return decoder.Origin{}, fmt.Errorf("timeline history %d: %w", sys.Timeline, err)
	}
	return o, nil
}

// parseHistory parses a timeline history file.
// It has a line "<timeline>\t<switch point>\t<reason>" for each earlier timeline, oldest first.
// Blank lines and lines starting with # are ignored.
func parseHistory(content string) ([]decoder.TimelineEnd, error) {
	var out []decoder.TimelineEnd
	for _, line := range strings.Split(content, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("line %q: want a timeline and a switch point", line)
		}
		tli, err := strconv.ParseInt(f[0], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("line %q: timeline: %w", line, err)
		}
		end, err := pglogrepl.ParseLSN(f[1])
		if err != nil {
			return nil, fmt.Errorf("line %q: switch point: %w", line, err)
		}
		out = append(out, decoder.TimelineEnd{Timeline: int32(tli), End: end})
	}
	return out, nil
}
