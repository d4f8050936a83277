package slots

import (
	"errors"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/registry"
)

// A slot held by the session's walsender passes if it is no further than the record, wherever
// the check found it; anything else is a refusal retrying cannot fix.
func TestJudgeHeld(t *testing.T) {
	const pid = 4242
	mine, other := int32(pid), int32(pid+1)
	c := HeldConfig{Slot: "s", PID: pid, Checked: inspect.Slot{ConfirmedFlush: 100}}
	rec := registry.Record{Slot: "s", ConfirmedLSN: 200}
	slot := func(pid *int32, at pglogrepl.LSN) inspect.Slot {
		return inspect.Slot{Name: "s", Exists: true, Active: pid != nil, ActivePID: pid, ConfirmedFlush: at}
	}
	stopped := rec
	stopped.Stop = registry.Stop{Reason: "drift", LSN: 150}
	for _, tc := range []struct {
		name     string
		info     inspect.Slot
		rec      registry.Record
		recorded bool
		want     error
	}{
		{"at the check's position", slot(&mine, 100), rec, true, nil},
		{"moved, but not past the record", slot(&mine, 200), rec, true, nil},
		{"moved past the record", slot(&mine, 201), rec, true, ErrSlotGap},
		{"held by another process", slot(&other, 100), rec, true, ErrSlotGap},
		{"held by nobody", slot(nil, 100), rec, true, ErrSlotGap},
		{"missing where it is read", inspect.Slot{Name: "s"}, rec, true, ErrSlotGap},
		{"record deleted", slot(&mine, 100), registry.Record{}, false, ErrSlotGap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := judgeHeld(c, tc.info, tc.rec, tc.recorded)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err != nil && !Refused(err) {
				t.Errorf("%v is not a refusal", err)
			}
		})
	}
	var stop *StopRecorded
	if err := judgeHeld(c, slot(&mine, 100), stopped, true); !errors.As(err, &stop) {
		t.Errorf("a stop recorded meanwhile: got %v, want a *StopRecorded", err)
	}
}
