//go:build compose

package composetest

import (
	"context"
	"slices"
	"time"

	"github.com/walbox/walbox/test/dockerenv"
)

// startOrder is the order docker-compose.yml promises: each service starts only once the
// services it needs are healthy (or, for walbox-migrate, completed).
var startOrder = map[string][]dockerenv.Dependency{
	"postgres":       nil,
	"rabbitmq":       nil,
	"walbox-migrate": {{Service: "postgres", Condition: dockerenv.Healthy}},
	"walbox": {
		{Service: "postgres", Condition: dockerenv.Healthy},
		{Service: "rabbitmq", Condition: dockerenv.Healthy},
		{Service: "walbox-migrate", Condition: dockerenv.Completed},
	},
	"orders": {{Service: "walbox-migrate", Condition: dockerenv.Completed}},
	"notifier": {
		{Service: "postgres", Condition: dockerenv.Healthy},
		{Service: "rabbitmq", Condition: dockerenv.Healthy},
	},
	"notifier-2": {
		{Service: "postgres", Condition: dockerenv.Healthy},
		{Service: "rabbitmq", Condition: dockerenv.Healthy},
	},
}

// up runs `docker-compose up -d` and waits up to wait for every service to be ready (healthy
// where it has a health check, running otherwise; walbox-migrate exited with 0). It returns the
// problems found, each naming its service, and the timeline of container events. A service
// whose restart policy restarted it once is not a problem (see dockerenv.CheckStartOrder); the
// timeline shows it.
func up(ctx context.Context, p *dockerenv.Project, wait time.Duration) (problems []string, timeline string) {
	rec, err := p.Record(ctx)
	if err != nil {
		return []string{err.Error()}, ""
	}
	if _, err := p.Compose(ctx, "up", "-d", "--no-build"); err != nil {
		problems = append(problems, "docker-compose up: "+err.Error())
	}
	services, err := p.Services(ctx)
	if err != nil {
		problems = append(problems, err.Error())
	}
	var want []string
	for svc := range startOrder {
		want = append(want, svc)
		if !slices.Contains(services, svc) {
			problems = append(problems, "service "+svc+" is missing from the compose file")
		}
	}
	slices.Sort(want)
	if len(problems) == 0 {
		if err := p.WaitReady(ctx, want, map[string]bool{"walbox-migrate": true}, wait); err != nil {
			problems = append(problems, err.Error())
		}
	}
	mayRestart := map[string]bool{}
	for svc := range startOrder {
		if s, err := p.State(ctx, svc); err == nil && s.Policy != "" && s.Policy != "no" {
			mayRestart[svc] = true
		}
	}
	events := rec.Stop()
	problems = append(problems, dockerenv.CheckStartOrder(events, startOrder, mayRestart)...)
	return problems, dockerenv.Timeline(events)
}
