package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// slotFailover reads whether slot is a failover slot (PostgreSQL 17+).
func (w *world) slotFailover(slot string) bool {
	w.t.Helper()
	var on bool
	if err := w.conn.QueryRow(w.t.Context(), "SELECT failover FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&on); err != nil {
		w.t.Fatalf("read slot %s: %v", slot, err)
	}
	return on
}

// On PostgreSQL 17 every slot walbox creates is a failover slot unless --failover-slot off says
// otherwise, walbox run makes an older slot one, and doctor checks the slot and
// synchronized_standby_slots, without which a failover can leave walbox having published a row
// the new primary never had.
func TestFailoverSlots(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.PGVersion(17))
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	if !w.slotFailover(w.slot) {
		t.Errorf("walbox migrate created slot %s without failover on PostgreSQL 17", w.slot)
	}
	r := w.doctor(nil)
	if c := r.check(t, "failover_slot"); c.Status != "pass" {
		t.Errorf("failover_slot: %s %q, want pass", c.Status, c.Message)
	}
	if c := r.check(t, "synchronized_standby_slots"); c.Status != "warn" || !strings.Contains(c.Fix, "ALTER SYSTEM SET synchronized_standby_slots") {
		t.Errorf("synchronized_standby_slots unset: %s %q (fix %q), want a warning with the fix", c.Status, c.Message, c.Fix)
	}

	// A slot made without failover (--failover-slot off, an older walbox): doctor warns, and
	// walbox run makes it a failover slot at start.
	old := testenv.UniqueName("slot")
	offEnv := []string{"WALBOX_SLOT=" + old, "WALBOX_FAILOVER_SLOT=off"}
	if out, code := w.walbox(offEnv, "migrate"); code != 0 {
		t.Fatalf("walbox migrate --failover-slot off exited %d:\n%s", code, out)
	}
	if w.slotFailover(old) {
		t.Errorf("--failover-slot off created a failover slot")
	}
	r = w.doctor([]string{"WALBOX_SLOT=" + old})
	if c := r.check(t, "failover_slot"); c.Status != "warn" || !strings.Contains(c.Fix, "FAILOVER true") {
		t.Errorf("failover_slot of a plain slot: %s %q (fix %q), want a warning with the fix", c.Status, c.Message, c.Fix)
	}
	relay := w.startRelay("WALBOX_SLOT=" + old)
	relay.WaitFor("streaming", 60*time.Second, func() bool { return strings.Contains(relay.Output(), "msg=streaming") })
	if !w.slotFailover(old) {
		t.Errorf("walbox run did not make slot %s a failover slot:\n%s", old, relay.Output())
	}
	relay.Stop(10 * time.Second)

	// With synchronized_standby_slots set, doctor passes it.
	w.pg.Exec(t, w.db, "SELECT pg_create_physical_replication_slot('standby1')")
	w.pg.Exec(t, w.db, "ALTER SYSTEM SET synchronized_standby_slots = 'standby1'")
	w.pg.Exec(t, w.db, "SELECT pg_reload_conf()")
	time.Sleep(500 * time.Millisecond)
	r = w.doctor(nil)
	if c := r.check(t, "synchronized_standby_slots"); c.Status != "pass" {
		t.Errorf("synchronized_standby_slots set: %s %q, want pass", c.Status, c.Message)
	}
}

// --failover-slot on is refused at start on a server before PostgreSQL 17, by every command that
// creates slots; auto is off there.
func TestFailoverSlotOnRefusedBefore17(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg) // the harness's own server is PostgreSQL 15; an external one may be newer
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	on := []string{"WALBOX_FAILOVER_SLOT=on", "WALBOX_SLOT=" + testenv.UniqueName("slot")}
	out, code := w.walbox(on, "migrate")
	if code == 0 || !strings.Contains(out, "has no failover slots") {
		t.Errorf("migrate --failover-slot on, PostgreSQL 15: exit %d:\n%s\nwant a refusal naming failover slots", code, out)
	}
	out, code = w.walbox(on, "run")
	if code == 0 || !strings.Contains(out, "has no failover slots") || strings.Contains(out, "retry_in") {
		t.Errorf("run --failover-slot on, PostgreSQL 15: exit %d:\n%s\nwant a stop at once naming failover slots", code, out)
	}
	out, code = w.walbox([]string{"WALBOX_FAILOVER_SLOT=sometimes"}, "run")
	if code != 2 || !strings.Contains(out, "--failover-slot") {
		t.Errorf("run --failover-slot sometimes: exit %d:\n%s\nwant exit 2 naming the setting", code, out)
	}
}
