package dockerenv

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Project is one docker-compose project on an engine.
type Project struct {
	Engine *Engine
	Name   string   // the project name (-p)
	Dir    string   // the project directory: build contexts and volumes are relative to it
	Files  []string // compose files (-f)
	Env    []string // extra environment for docker-compose, such as image substitutions
}

// Compose runs docker-compose on the project and returns its standard output.
func (p *Project) Compose(ctx context.Context, args ...string) (string, error) {
	return output(p.command(ctx, args...))
}

func (p *Project) command(ctx context.Context, args ...string) *exec.Cmd {
	all := []string{"--ansi", "never", "-p", p.Name, "--project-directory", p.Dir}
	for _, f := range p.Files {
		all = append(all, "-f", f)
	}
	cmd := exec.CommandContext(ctx, "docker-compose", append(all, args...)...)
	cmd.Env = append(p.Engine.Env(), p.Env...)
	return cmd
}

// Services lists the services that `up` starts (profiles other than the default are left out).
func (p *Project) Services(ctx context.Context) ([]string, error) {
	out, err := p.Compose(ctx, "config", "--services")
	return strings.Fields(out), err
}

// State is what the engine says about a service's container.
type State struct {
	Container    string
	Status       string // created, running, restarting, exited, ...
	Health       string // "" without a health check; starting, healthy, unhealthy
	ExitCode     int
	RestartCount int    // restarts by the restart policy since the container was last started by hand
	Policy       string // the restart policy: no, always, unless-stopped, on-failure
	StartedAt    time.Time
	Pid          int    // of the container's main process, on the host; 0 unless running
	IP           string // on the project's network
	Check        HealthCheck
}

// HealthCheck is a container's health check as the engine runs it (zero without one).
type HealthCheck struct {
	Interval, Timeout, StartPeriod time.Duration
	Retries                        int
}

// Unhealthy returns how long a container whose check fails from its start takes at most to be
// reported unhealthy: its start period, then Retries failed checks, each after an interval and
// taking up to its timeout.
func (h HealthCheck) Unhealthy() time.Duration {
	return h.StartPeriod + time.Duration(h.Retries)*(h.Interval+h.Timeout)
}

// Ready reports whether the service is up: healthy if it has a health check, else running.
func (s State) Ready() bool {
	return s.Status == "running" && (s.Health == "" || s.Health == "healthy")
}

func (s State) String() string {
	str := s.Status
	if s.Health != "" {
		str += ", " + s.Health
	}
	if s.Status != "running" {
		str += fmt.Sprintf(", exit code %d", s.ExitCode)
	}
	return fmt.Sprintf("%s, %d restarts", str, s.RestartCount)
}

// State inspects the service's container (the first, if it has several).
func (p *Project) State(ctx context.Context, service string) (State, error) {
	id, err := p.Compose(ctx, "ps", "-q", service)
	if err != nil {
		return State{}, err
	}
	if id = strings.TrimSpace(strings.Split(id, "\n")[0]); id == "" {
		return State{}, fmt.Errorf("%s: no container", service)
	}
	out, err := p.Engine.Docker(ctx, "inspect", "--format", "{{json .}}", id)
	if err != nil {
		return State{}, err
	}
	var c struct {
		RestartCount int
		HostConfig   struct{ RestartPolicy struct{ Name string } }
		Config       struct{ Healthcheck *HealthCheck }
		State        struct {
			Status    string
			ExitCode  int
			StartedAt time.Time
			Pid       int
			Health    *struct{ Status string }
		}
		NetworkSettings struct {
			Networks map[string]struct{ IPAddress string }
		}
	}
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		return State{}, fmt.Errorf("inspect %s: %w", service, err)
	}
	s := State{Container: id, Status: c.State.Status, ExitCode: c.State.ExitCode, RestartCount: c.RestartCount,
		Policy: c.HostConfig.RestartPolicy.Name, StartedAt: c.State.StartedAt, Pid: c.State.Pid}
	if c.State.Health != nil {
		s.Health = c.State.Health.Status
	}
	if c.Config.Healthcheck != nil {
		s.Check = *c.Config.Healthcheck
	}
	for _, n := range c.NetworkSettings.Networks {
		s.IP = n.IPAddress
	}
	return s, nil
}

// Logs returns the last lines the service logged.
func (p *Project) Logs(ctx context.Context, service string) string {
	out, err := p.Compose(ctx, "logs", "--no-color", "--tail", "30", service)
	if err != nil {
		return err.Error()
	}
	return out
}

// Down removes the project's containers, networks and volumes.
func (p *Project) Down(ctx context.Context) error {
	_, err := p.Compose(ctx, "down", "-v", "--remove-orphans", "-t", "5")
	return err
}

// WaitReady waits until every service is ready, or fails naming the services that are not,
// with their state and last log lines. A service in oneShot must instead have exited with 0.
func (p *Project) WaitReady(ctx context.Context, services []string, oneShot map[string]bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var pending []string
		for _, svc := range services {
			s, err := p.State(ctx, svc)
			switch {
			case err != nil:
				pending = append(pending, fmt.Sprintf("%s: %v", svc, err))
			case oneShot[svc] && s.Status == "exited" && s.ExitCode != 0:
				return fmt.Errorf("service %s failed: %s\n%s", svc, s, p.Logs(ctx, svc))
			case oneShot[svc] && s.Status == "exited":
			case !oneShot[svc] && s.Ready():
			default:
				pending = append(pending, fmt.Sprintf("%s: %s\n%s", svc, s, p.Logs(ctx, svc)))
			}
		}
		if len(pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not ready after %v:\nservice %s", timeout, strings.Join(pending, "\nservice "))
		}
		time.Sleep(time.Second)
	}
}
