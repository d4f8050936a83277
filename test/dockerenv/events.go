package dockerenv

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"
)

// Event is a container event of a project's service.
type Event struct {
	Time     time.Time
	Service  string
	Action   string // create, start, die, kill, health_status: healthy, ...
	ExitCode string // for die
}

// Recorder collects the container events of one project from the engine.
type Recorder struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	events []Event
}

// Record starts collecting the project's container events.
func (p *Project) Record(ctx context.Context) (*Recorder, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &Recorder{cancel: cancel, done: make(chan struct{})}
	r.cmd = exec.CommandContext(ctx, p.Engine.docker, "events", "--format", "{{json .}}",
		"--filter", "type=container", "--filter", "label=com.docker.compose.project="+p.Name)
	r.cmd.Env = p.Engine.Env()
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	if err := r.cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("docker events: %w", err)
	}
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e struct {
				Action   string
				TimeNano int64 `json:"timeNano"`
				Actor    struct{ Attributes map[string]string }
			}
			if json.Unmarshal(sc.Bytes(), &e) != nil || strings.HasPrefix(e.Action, "exec_") {
				continue // health checks run as exec_* events: too many to show
			}
			r.mu.Lock()
			r.events = append(r.events, Event{Time: time.Unix(0, e.TimeNano), Service: e.Actor.Attributes["com.docker.compose.service"],
				Action: e.Action, ExitCode: e.Actor.Attributes["exitCode"]})
			r.mu.Unlock()
		}
		_ = r.cmd.Wait()
	}()
	time.Sleep(200 * time.Millisecond) // let the subscription reach the engine
	return r, nil
}

// Stop ends collecting and returns the events in time order.
func (r *Recorder) Stop() []Event {
	time.Sleep(200 * time.Millisecond) // events just emitted
	r.cancel()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	sort.SliceStable(r.events, func(i, j int) bool { return r.events[i].Time.Before(r.events[j].Time) })
	return r.events
}

// Condition is what a service waits for in another before it may start.
type Condition int

const (
	Healthy   Condition = iota // the other passed its health check
	Completed                  // the other exited with status 0
)

// Dependency says that a service may start only once Service met Condition.
type Dependency struct {
	Service   string
	Condition Condition
}

// CheckStartOrder checks the events of an `up`: every service in deps started once, and only
// after each of its dependencies was healthy or had completed. A service in mayRestart (one with
// a restart policy) may be started a second time, by its policy after it exited while what it
// uses became ready; a third start is a crash loop. It returns one line per violation, naming
// the service.
func CheckStartOrder(events []Event, deps map[string][]Dependency, mayRestart map[string]bool) []string {
	first := map[string]time.Time{} // the first time each condition held, keyed "service/condition"
	starts := map[string][]time.Time{}
	for _, e := range events {
		switch {
		case e.Action == "start":
			starts[e.Service] = append(starts[e.Service], e.Time)
		case e.Action == "health_status: healthy":
			setFirst(first, fmt.Sprintf("%s/%d", e.Service, Healthy), e.Time)
		case e.Action == "die" && e.ExitCode == "0":
			setFirst(first, fmt.Sprintf("%s/%d", e.Service, Completed), e.Time)
		}
	}
	var t0 time.Time
	if len(events) > 0 {
		t0 = events[0].Time
	}
	at := func(t time.Time) string { return "+" + t.Sub(t0).Round(time.Millisecond).String() }
	var problems []string
	for _, svc := range sortedKeys(deps) {
		s := starts[svc]
		if len(s) == 0 {
			problems = append(problems, fmt.Sprintf("service %s never started", svc))
			continue
		}
		switch {
		case len(s) > 2:
			problems = append(problems, fmt.Sprintf("service %s started %d times: a crash loop", svc, len(s)))
		case len(s) > 1 && !mayRestart[svc]:
			problems = append(problems, fmt.Sprintf("service %s started %d times, without a restart policy", svc, len(s)))
		}
		for _, d := range deps[svc] {
			met, ok := first[fmt.Sprintf("%s/%d", d.Service, d.Condition)]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("service %s started at %s, but %s never became %s", svc, at(s[0]), d.Service, d.Condition))
			case met.After(s[0]):
				problems = append(problems, fmt.Sprintf("service %s started at %s, before %s was %s (at %s)", svc, at(s[0]), d.Service, d.Condition, at(met)))
			}
		}
	}
	return problems
}

func (c Condition) String() string {
	if c == Completed {
		return "completed"
	}
	return "healthy"
}

func setFirst(m map[string]time.Time, key string, t time.Time) {
	if _, ok := m[key]; !ok {
		m[key] = t
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Timeline renders events for a log, relative to the first.
func Timeline(events []Event) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "%8s %-15s %s", e.Time.Sub(events[0].Time).Round(10*time.Millisecond), e.Service, e.Action)
		if e.ExitCode != "" {
			fmt.Fprintf(&b, " (exit %s)", e.ExitCode)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
