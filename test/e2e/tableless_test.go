package e2e_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// doctor and status know whether walbox relays messages written without rows, with which
// prefix, and whether walbox_emit is there to write them with that prefix.
func TestDoctorAndStatusKnowTheMessageMode(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))

	if c := w.doctor(nil).check(t, "emit_function"); c.Status != "pass" || !strings.Contains(c.Message, `"walbox"`) {
		t.Errorf("after migrate: %s %q, want a pass naming the prefix", c.Status, c.Message)
	}
	out, code := w.walbox(nil, "status", "--json")
	var st struct {
		MessagePrefix string `json:"message_prefix"`
		EmitFunction  bool   `json:"emit_function"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("status --json: exit %d, %v\n%s", code, err, out)
	}
	if st.MessagePrefix != "walbox" || !st.EmitFunction {
		t.Errorf("status: prefix %q, emit function %t; want walbox, true", st.MessagePrefix, st.EmitFunction)
	}
	if out, _ := w.walbox(nil, "status"); !strings.Contains(out, "messages             prefix walbox (walbox_emit present)\n") {
		t.Errorf("status does not show the message mode:\n%s", out)
	}

	// A relay reading another prefix than the function writes would never publish its messages.
	r := w.doctor([]string{"WALBOX_MESSAGE_PREFIX=billing"})
	if r.code == 0 {
		t.Errorf("doctor passed with a prefix walbox_emit does not write:\n%s", r.out)
	}
	r.wantFail(t, "emit_function", "--message-prefix")

	// Messages off while the function exists: whatever it writes is never published.
	if c := w.doctor([]string{"WALBOX_MESSAGE_PREFIX=none"}).check(t, "emit_function"); c.Status != "warn" || c.Fix == "" {
		t.Errorf("messages off with walbox_emit present: %s %q, want a warning with a fix", c.Status, c.Message)
	}
	if out, _ := w.walbox([]string{"WALBOX_MESSAGE_PREFIX=none"}, "status"); !strings.Contains(out, "messages             off (table only)\n") {
		t.Errorf("status with messages off:\n%s", out)
	}

	// walbox_emit has two overloads (with and without deliver_at): drop both.
	if _, err := w.conn.Exec(context.Background(), `DO $$ DECLARE f pg_catalog.regprocedure; BEGIN
		FOR f IN SELECT p.oid FROM pg_catalog.pg_proc p WHERE p.proname OPERATOR(pg_catalog.=) 'walbox_emit'
			AND p.pronamespace OPERATOR(pg_catalog.=) 'public'::pg_catalog.regnamespace LOOP
			EXECUTE 'DROP FUNCTION ' || f::pg_catalog.text;
		END LOOP; END $$`); err != nil {
		t.Fatal(err)
	}
	if c := w.doctor(nil).check(t, "emit_function"); c.Status != "warn" || !strings.Contains(c.Fix, "walbox migrate") {
		t.Errorf("without walbox_emit: %s %q (fix %q), want a warning to migrate", c.Status, c.Message, c.Fix)
	}
}

// walbox run refuses to start when walbox_emit writes another prefix than --message-prefix, as
// doctor fails it: the relay would skip every message the function writes, in silence. The
// refusal is one line naming the setting, both prefixes and the fix, with exit 1, as the other
// refusals found on the server (a missing table, a role that cannot write the record).
func TestRunRefusesAnotherPrefixThanWalboxEmits(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))

	out, code := w.walbox([]string{"WALBOX_MESSAGE_PREFIX=billing"}, "run")
	wantExit(t, code, 1, out)
	last := out[strings.LastIndex(strings.TrimRight(out, "\n"), "\n")+1:]
	oneLine(t, last, "walbox run: --message-prefix billing", "public.walbox_emit emits with prefix \"walbox\", not \"billing\"",
		"--message-prefix walbox")

	// The prefix it was migrated with, and no messages at all, both start.
	for _, prefix := range []string{"walbox", "none"} {
		relay := w.startRelay("WALBOX_MESSAGE_PREFIX=" + prefix)
		relay.WaitFor("streaming with --message-prefix "+prefix, time.Minute, func() bool {
			return strings.Contains(relay.Output(), "msg=streaming")
		})
		relay.Stop(time.Minute)
	}
}
