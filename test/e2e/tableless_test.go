package e2e_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

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

	if _, err := w.conn.Exec(context.Background(), "DROP FUNCTION walbox_emit"); err != nil {
		t.Fatal(err)
	}
	if c := w.doctor(nil).check(t, "emit_function"); c.Status != "warn" || !strings.Contains(c.Fix, "walbox migrate") {
		t.Errorf("without walbox_emit: %s %q (fix %q), want a warning to migrate", c.Status, c.Message, c.Fix)
	}
}
