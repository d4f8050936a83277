package dockerenv_test

import (
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/test/dockerenv"
)

func TestCheckStartOrder(t *testing.T) {
	deps := map[string][]dockerenv.Dependency{
		"db":      nil,
		"migrate": {{Service: "db", Condition: dockerenv.Healthy}},
		"app":     {{Service: "db", Condition: dockerenv.Healthy}, {Service: "migrate", Condition: dockerenv.Completed}},
	}
	t0 := time.Unix(1000, 0)
	ev := func(sec float64, svc, action, exit string) dockerenv.Event {
		return dockerenv.Event{Time: t0.Add(time.Duration(sec * float64(time.Second))), Service: svc, Action: action, ExitCode: exit}
	}
	inOrder := []dockerenv.Event{
		ev(0, "db", "start", ""), ev(2, "db", "health_status: healthy", ""),
		ev(3, "migrate", "start", ""), ev(4, "migrate", "die", "0"), ev(5, "app", "start", ""),
	}
	for _, tc := range []struct {
		name   string
		events []dockerenv.Event
		want   []string // substrings of the problems, one each; none for a clean start
	}{
		{"every service after what it needs is clean", inOrder, nil},
		{"a service started before its dependency was healthy is named",
			[]dockerenv.Event{ev(0, "db", "start", ""), ev(1, "migrate", "start", ""), ev(1.5, "migrate", "die", "0"),
				ev(1.6, "app", "start", ""), ev(2, "db", "health_status: healthy", "")},
			[]string{"service app started at +1.6s, before db was healthy (at +2s)", "service migrate started at +1s, before db was healthy"}},
		{"a dependency that failed never completed",
			[]dockerenv.Event{ev(0, "db", "start", ""), ev(2, "db", "health_status: healthy", ""),
				ev(3, "migrate", "start", ""), ev(4, "migrate", "die", "1"), ev(5, "app", "start", "")},
			[]string{"service app started at +5s, but migrate never became completed"}},
		{"a service with a restart policy may be restarted once", append(inOrder, ev(6, "app", "die", "2"), ev(7, "app", "start", "")), nil},
		{"a service restarted twice is in a crash loop",
			append(inOrder, ev(6, "app", "die", "2"), ev(7, "app", "start", ""), ev(8, "app", "die", "2"), ev(9, "app", "start", "")),
			[]string{"service app started 3 times: a crash loop"}},
		{"a service without a restart policy started twice is named",
			append(inOrder, ev(6, "db", "die", "2"), ev(7, "db", "start", "")),
			[]string{"service db started 2 times, without a restart policy"}},
		{"a service that never started is named", inOrder[:4], []string{"service app never started"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := dockerenv.CheckStartOrder(tc.events, deps, map[string]bool{"app": true})
			if len(got) != len(tc.want) {
				t.Fatalf("problems %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for _, want := range tc.want {
				found := false
				for _, p := range got {
					found = found || strings.Contains(p, want)
				}
				if !found {
					t.Errorf("problems %q lack %q", got, want)
				}
			}
		})
	}
}
