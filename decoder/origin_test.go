package decoder_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/decoder"
)

func TestPositionIDsNameTheSystemAndTimeline(t *testing.T) {
	const lsn, ordinal = pglogrepl.LSN(0x16_B374D848), 3
	// 2025-11-28 04:00:00.123456 UTC, 817617600123456 microseconds after 2000-01-01.
	at := time.Date(2025, 11, 28, 4, 0, 0, 123456000, time.UTC)
	primary := decoder.Origin{SystemID: 7301234567890123456, Timeline: 1}
	// A standby promoted at 16/B0000000 writes timeline 2 from there on; the same LSN after the
	// switch point is another transaction.
	promoted := decoder.Origin{SystemID: primary.SystemID, Timeline: 2,
		History: []decoder.TimelineEnd{{Timeline: 1, End: 0x16_B0000000}}}
	other := decoder.Origin{SystemID: 7309999999999999999, Timeline: 1}

	ns := uuid.MustParse(decoder.PositionNamespace)
	want := uuid.NewSHA1(ns, []byte("7301234567890123456/1/"+lsn.String()+"/817617600123456/"+strconv.Itoa(ordinal)))
	if got := primary.PositionID(lsn, at, ordinal); got != want {
		t.Fatalf("PositionID = %v, want %v, the version 5 UUID of \"<system>/<timeline>/<lsn>/<commit time>/<ordinal>\"", got, want)
	}
	ids := map[string]uuid.UUID{
		"legacy":              decoder.PositionID(lsn, ordinal),
		"primary":             primary.PositionID(lsn, at, ordinal),
		"after the promotion": promoted.PositionID(lsn, at, ordinal),
		"another system":      other.PositionID(lsn, at, ordinal),
		// A data directory restored from a plain copy keeps its system and timeline, and writes
		// the position again with a later transaction.
		"restored, a microsecond later": primary.PositionID(lsn, at.Add(time.Microsecond), ordinal),
	}
	seen := map[uuid.UUID]string{}
	for name, id := range ids {
		if prev, ok := seen[id]; ok {
			t.Errorf("%s and %s share the id %v", name, prev, id)
		}
		seen[id] = name
	}
	// WAL written before the switch point keeps its id on the new timeline: a replay of it is a
	// duplicate that consumers can recognise.
	early := pglogrepl.LSN(0x16_A0000000)
	if got, want := promoted.PositionID(early, at, 0), primary.PositionID(early, at, 0); got != want {
		t.Errorf("a transaction from before the switch point: id %v on the new timeline, %v on the old", got, want)
	}
	var zero decoder.Origin
	if got := zero.PositionID(lsn, at, ordinal); got != ids["legacy"] {
		t.Errorf("the zero Origin gives %v, want PositionID's %v", got, ids["legacy"])
	}
}
