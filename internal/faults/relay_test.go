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
	"syscall"
	"testing"
	"time"
)

// relay is a `walbox run` subprocess with its HTTP listener on a port of its own.
type relay struct {
	t     *testing.T
	extra []string // the environment settings it was started with
	cmd   *exec.Cmd
	addr  string // the relay's /status listener
	out   *lockedBuffer
	done  chan struct{}
	err   error
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
	addr := freeAddr(w.t)
	cmd := exec.Command(walboxBin, "run")
	cmd.Env = w.env(append([]string{"WALBOX_LISTEN=" + addr}, extra...))
	// The relay dies with the test binary, however that ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r := &relay{t: w.t, extra: extra, cmd: cmd, addr: addr, out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = r.out, r.out
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	w.relays = append(w.relays, r)
	w.t.Cleanup(func() {
		r.kill()
		out := r.out.String()
		if strings.Contains(out, "WARNING: DATA RACE") {
			w.t.Errorf("RELAY BUG: the race detector reported a data race in walbox run:\n%s", out)
		} else if w.t.Failed() {
			w.t.Logf("walbox run (pid %d) output:\n%s", cmd.Process.Pid, tail(out, 60))
		}
	})
	return r
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = append([]string{fmt.Sprintf("... (%d lines before)", len(l)-lines)}, l[len(l)-lines:]...)
	}
	return strings.Join(l, "\n")
}

func (r *relay) pid() int { return r.cmd.Process.Pid }

func (r *relay) signal(sig syscall.Signal) {
	select {
	case <-r.done:
	default:
		_ = r.cmd.Process.Signal(sig)
	}
}

// kill SIGKILLs the relay and waits for it.
func (r *relay) kill() {
	r.signal(syscall.SIGKILL)
	<-r.done
}

func (r *relay) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// wait waits for the relay to exit and returns its exit code.
func (r *relay) wait(timeout time.Duration) int {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		r.t.Fatalf("walbox run still running after %v:\n%s", timeout, tail(r.out.String(), 40))
	}
	return r.exitCode()
}

// exitCode returns the exit code of a relay that exited.
func (r *relay) exitCode() int {
	if r.err == nil {
		return 0
	}
	if ee, ok := r.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
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
		if r.exited() {
			r.t.Fatalf("walbox run exited while waiting for state %s:\n%s", state, tail(r.out.String(), 40))
		}
		if time.Since(start) > timeout {
			st, err := r.status()
			r.t.Fatalf("relay not %s after %v (status %+v, %v):\n%s", state, timeout, st, err, tail(r.out.String(), 40))
		}
		time.Sleep(25 * time.Millisecond)
	}
	return time.Since(start)
}

// peakRSS returns the relay's peak resident set size (VmHWM) in bytes; the process must be alive.
func (r *relay) peakRSS() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.pid()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", r.pid())
}
