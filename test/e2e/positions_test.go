package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// TestPositionIDsWithARowFilterRefused: position ids (message-id: position) number a row among
// the rows its publication sends, so shards, or any row filter, would give two messages one id.
// migrate, run, reshard and doctor refuse the combination, each in one line naming the setting.
func TestPositionIDsWithARowFilterRefused(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	ctx := context.Background()
	conf := filepath.Join(t.TempDir(), "positions.yaml")
	if err := os.WriteFile(conf, []byte("tables:\n  - table: public.outbox\n    message-id: position\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	positions := "WALBOX_CONFIG=" + conf

	// A database of its own, where migrate --shards 2 would otherwise create the shards.
	sharded := pg.NewDatabase(t)
	onSharded := "WALBOX_DATABASE_URL=" + sharded
	t.Run("migrate --shards 2", func(t *testing.T) {
		out, code := w.walbox([]string{onSharded, positions}, "migrate", "--shards", "2")
		wantExit(t, code, 2, out)
		oneLine(t, out, "--shards", "message-id: position", "public.outbox")
		var pubs int
		if err := pg.Conn(t, sharded).QueryRow(ctx, `SELECT count(*) FROM pg_publication`).Scan(&pubs); err != nil {
			t.Fatal(err)
		}
		if pubs != 0 {
			t.Errorf("migrate created %d publications before it refused", pubs)
		}
	})

	// The shards made with an id column; a relay of one of them is then asked for position ids.
	if out, code := w.walbox([]string{onSharded}, "migrate", "--shards", "2"); code != 0 {
		t.Fatalf("walbox migrate --shards 2 exited %d:\n%s", code, out)
	}
	t.Run("run a shard", func(t *testing.T) {
		out, code := w.walbox([]string{onSharded, positions}, "run", "--shards", "2", "--shard", "0")
		wantExit(t, code, 2, out)
		oneLine(t, out, "--shards", "message-id: position")
		out, code = w.walbox([]string{onSharded, positions}, "run", "--shard", "1")
		wantExit(t, code, 2, out)
		oneLine(t, out, "--shard ", "message-id: position")
	})
	t.Run("doctor on shards", func(t *testing.T) {
		r := w.doctor([]string{onSharded, positions})
		r.wantFail(t, "position_ids", "message-id: column")
	})

	t.Run("reshard --shards 2", func(t *testing.T) {
		out, code := w.walbox([]string{positions}, "reshard", "--shards", "2")
		wantExit(t, code, 2, out)
		oneLine(t, out, "--shards", "message-id: position")
	})

	// The single slot's publication given a row filter by hand, while a relay runs: the relay
	// stops, since its publication changed under it (the table's entry is a new one); started
	// again, it refuses the filter as a bad setting (below).
	relay := w.startRelay(positions)
	relay.WaitFor("streaming", time.Minute, func() bool { return strings.Contains(relay.Output(), "msg=streaming") })
	if _, err := w.conn.Exec(ctx, `ALTER PUBLICATION walbox SET TABLE public.outbox WHERE (event_type <> 'skip')`); err != nil {
		t.Fatal(err)
	}
	t.Run("a row filter added while running", func(t *testing.T) {
		if _, err := w.conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE slot_name = $1`, w.slot); err != nil {
			t.Fatal(err)
		}
		if code := relay.Wait(2 * time.Minute); code == 0 || !strings.Contains(relay.Output(), `publication "walbox"`) {
			t.Errorf("walbox run exited %d once its publication filtered rows with position ids, want a refusal "+
				"naming the publication:\n%s", code, testenv.Tail(relay.Output(), 10))
		}
	})
	t.Run("run with a row filter", func(t *testing.T) {
		out, code := w.walbox([]string{positions}, "run")
		wantExit(t, code, 2, out)
		oneLine(t, out, "--config", "message-id: position", "publication walbox", "row filter")
	})
	t.Run("migrate with a row filter", func(t *testing.T) {
		out, code := w.walbox([]string{positions}, "migrate")
		wantExit(t, code, 2, out)
		oneLine(t, out, "--config", "message-id: position", "row filter")
	})
	t.Run("doctor with a row filter", func(t *testing.T) {
		r := w.doctor([]string{positions})
		r.wantFail(t, "position_ids", "message-id: column")
	})
	t.Run("an id column passes", func(t *testing.T) {
		r := w.doctor(nil)
		for _, c := range r.Checks {
			if c.Name == "position_ids" {
				t.Errorf("doctor checks position ids of a table with an id column: %s %q", c.Status, c.Message)
			}
		}
	})
}
