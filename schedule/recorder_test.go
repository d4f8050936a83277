package schedule_test

import (
	"context"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/schedule"
	"github.com/walbox/walbox/wire"
)

// A relay newer than its schema: walbox migrate has not applied migration 018 (sent_by) yet. Its
// Recorder still records, reading the notes as before 018, and warns once. Each record failed before,
// ending the relay's session at the row, forever. The Recorder's role may only read and insert
// into the schedule's tables. Once the column exists, the next session reads sent_by again.
func TestARecorderAheadOfItsMigrationRecordsAndWarns(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	pg.Exec(t, db, "ALTER TABLE public.walbox_schedule_done DROP COLUMN sent_by")
	relay := recordingRole(t, pg, db)
	sentHere, cancelled, sentElsewhere, fresh := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	// Notes as a relay before 018 wrote them: a sent message under its slot, a cancel under ''.
	pg.Exec(t, db, `INSERT INTO public.walbox_schedule_done (message_id, slot_name, state)
		VALUES ($1, 's', 'sent'), ($2, '', 'cancelled'), ($3, 'other', 'sent')`, sentHere.String(), cancelled.String(), sentElsewhere.String())

	w := &warnings{}
	if got := recordAll(t, relay, w, sentHere, cancelled, sentElsewhere, fresh); got != nil {
		t.Fatalf("records on a schema before migration 018 failed: %v", got)
	}
	want := []string{sentElsewhere.String(), fresh.String()}
	slices.Sort(want)
	if got := recordedIDs(t, conn); !slices.Equal(got, want) {
		t.Errorf("recorded %q, want %q: a record skips only this slot's sent notes and the cancels", got, want)
	}
	w.mu.Lock()
	warned := slices.Clone(w.msgs)
	w.mu.Unlock()
	if len(warned) != 1 || !strings.Contains(warned[0], "walbox migrate") {
		t.Errorf("warnings %q, want one that asks for walbox migrate", warned)
	}

	// walbox migrate ran: a message this slot sent since is noted under '', in sent_by.
	pg.Exec(t, db, "ALTER TABLE public.walbox_schedule_done ADD COLUMN sent_by text[]")
	sentSince := uuid.New()
	pg.Exec(t, db, `INSERT INTO public.walbox_schedule_done (message_id, slot_name, state, sent_by) VALUES ($1, '', 'sent', '{s}')`, sentSince.String())
	w = &warnings{}
	if got := recordAll(t, relay, w, sentSince); got != nil {
		t.Fatalf("record once migrated: %v", got)
	}
	if got := recordedIDs(t, conn); !slices.Equal(got, want) {
		t.Errorf("recorded %q once migrated, want %q: a replay of a message sent since is skipped", got, want)
	}
	if len(w.msgs) != 0 {
		t.Errorf("warnings once migrated: %q, want none", w.msgs)
	}
}

// A recorder's session began before walbox migrate added sent_by. A migrated relay of another slot
// then sent X first, and this slot sent Y. The session still records X, which this slot never sent,
// and skips Y. Skipping every sent note lost X for this slot's broker.
func TestARecorderBegunBeforeMigration018ReadsSentByOnceItExists(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	pg.Exec(t, db, "ALTER TABLE public.walbox_schedule_done DROP COLUMN sent_by")
	rec := openRecorder(t, recordingRole(t, pg, db), &warnings{})
	before := uuid.New() // the session records before the migration, so its statement is prepared
	if err := recordWith(t, rec, before); err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, db, "ALTER TABLE public.walbox_schedule_done ADD COLUMN sent_by text[]")
	x, y, none, empty := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	pg.Exec(t, db, `INSERT INTO public.walbox_schedule_done (message_id, slot_name, state, sent_by)
		VALUES ($1, '', 'sent', '{other}'), ($2, '', 'sent', '{other,s}'), ($3, '', 'sent', NULL), ($4, '', 'sent', '{}')`,
		x.String(), y.String(), none.String(), empty.String())
	if err := recordWith(t, rec, x, y, none, empty); err != nil {
		t.Fatal(err)
	}
	want := []string{before.String(), x.String(), none.String(), empty.String()}
	slices.Sort(want)
	if got := recordedIDs(t, conn); !slices.Equal(got, want) {
		t.Errorf("slot s recorded %q, want %q: another slot sent them, or none named; slot s sent %s", got, want, y)
	}
}

// recordingRole creates a role that may only read and insert into the schedule's tables, dropped
// with the test, and returns db's URL for it.
func recordingRole(t *testing.T, pg *testenv.Postgres, db string) string {
	t.Helper()
	testenv.RequireOwn(t, pg) // an external server may not admit the new role
	role := testenv.UniqueName("recorder")
	ident := pgx.Identifier{role}.Sanitize()
	pg.Exec(t, db, "CREATE ROLE "+ident+" LOGIN")
	t.Cleanup(func() {
		pg.Exec(t, db, "DROP OWNED BY "+ident)
		pg.Exec(t, db, "DROP ROLE "+ident)
	})
	pg.Exec(t, db, "GRANT SELECT, INSERT ON public.walbox_schedule, public.walbox_schedule_done TO "+ident)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// recordAll records ids for slot s over a new Recorder on db, which logs to w. It returns the
// first failed verdict's error.
func recordAll(t *testing.T, db string, w *warnings, ids ...uuid.UUID) error {
	t.Helper()
	return recordWith(t, openRecorder(t, db, w), ids...)
}

// openRecorder returns a Recorder for slot s on db, which logs to w, closed with the test.
func openRecorder(t *testing.T, db string, w *warnings) *schedule.Recorder {
	t.Helper()
	p, err := schedule.Wrap(context.Background(), &instant{confirms: make(chan wire.Confirm, 16)}, db, "public", "s", 16, nil, slog.New(w))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p.(*schedule.Recorder)
}

// recordWith records ids over rec. It returns the first failed verdict's error.
func recordWith(t *testing.T, rec *schedule.Recorder, ids ...uuid.UUID) error {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		m := &wire.Message{ID: id, EventType: "order.reminder", Payload: []byte(`{}`), DeliverAt: time.Now().Add(time.Hour)}
		if _, err := rec.Schedule(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	for range ids {
		select {
		case c := <-rec.Confirms():
			if c.Err != nil {
				return c.Err
			}
		case <-time.After(time.Minute):
			t.Fatal("no verdict after a minute")
		}
	}
	return nil
}

// recordedIDs returns the message ids in slot s's schedule, sorted.
func recordedIDs(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT message_id FROM public.walbox_schedule WHERE slot_name = 's' ORDER BY message_id COLLATE \"C\"")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}
