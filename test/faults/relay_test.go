package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// relay is a `walbox run` subprocess with its HTTP listener on a port of its own.
type relay struct {
	*testenv.Program
	t     *testing.T
	extra []string // the environment settings it was started with
	addr  string   // the relay's /status listener
}

// relayStatus is the part of the relay's /status the tests read.
type relayStatus struct {
	State         string `json:"state"`
	LastError     string `json:"last_error"`
	Published     uint64 `json:"published"`
	Confirmed     uint64 `json:"confirmed"`
	Parked        uint64 `json:"parked"`
	Sessions      uint64 `json:"sessions"`
	BrokerBlocked bool   `json:"broker_blocked"`
	Broker        string `json:"broker"`
}

// startRelay starts `walbox run` on the world; extra environment settings win.
func (w *world) startRelay(extra ...string) *relay {
	w.t.Helper()
	addr := testenv.FreeAddr(w.t)
	cmd := exec.Command(walboxBin(w.t), "run")
	cmd.Env = w.env(append([]string{"WALBOX_LISTEN=" + addr}, extra...))
	r := &relay{Program: testenv.Start(w.t, cmd), t: w.t, extra: extra, addr: addr}
	w.relays = append(w.relays, r)
	return r
}

// status reads the relay's /status.
func (r *relay) status() (relayStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.addr+"/status", nil)
	if err != nil {
		return relayStatus{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return relayStatus{}, err
	}
	defer resp.Body.Close()
	var st relayStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return relayStatus{}, err
	}
	return st, nil
}

// state returns the relay's state, or "" when its /status cannot be read.
func (r *relay) state() string {
	st, err := r.status()
	if err != nil {
		return ""
	}
	return st.State
}

// waitState waits until the relay reports state and returns how long that took.
func (r *relay) waitState(state string, timeout time.Duration) time.Duration {
	r.t.Helper()
	start := time.Now()
	for r.state() != state {
		if r.Exited() {
			r.t.Fatalf("walbox run exited while waiting for state %s:\n%s", state, testenv.Tail(r.Output(), 40))
		}
		if time.Since(start) > timeout {
			st, err := r.status()
			r.t.Fatalf("relay not %s after %v (status %+v, %v):\n%s", state, timeout, st, err, testenv.Tail(r.Output(), 40))
		}
		time.Sleep(25 * time.Millisecond)
	}
	return time.Since(start)
}

// peakRSS returns the relay's peak resident set size (VmHWM) in bytes; the process must be alive.
func (r *relay) peakRSS() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.PID()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", r.PID())
}
