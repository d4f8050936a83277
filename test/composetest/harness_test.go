//go:build compose

package composetest

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/test/dockerenv"
)

// The harness catches compose defects: a copy of docker-compose.yml in which walbox reads a
// misspelt variable and the notifier no longer waits for RabbitMQ fails, naming both services.
func TestHarnessReportsBrokenCompose(t *testing.T) {
	requireEngine(t)
	data, err := os.ReadFile(filepath.Join(repo, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	broken := string(data)
	for _, defect := range []struct{ after, old, new string }{
		{"\n  walbox:\n", "      WALBOX_AMQP_URL:", "      WALBOX_AMQP_ADDRESS:"},
		{"\n  notifier:\n", "      rabbitmq: {condition: service_healthy}\n", ""},
		// rabbitmq is first probed after its interval: notifier, no longer waiting for it, is
		// sure to start before it is healthy, so the missing dependency shows in every run.
		{"\n  rabbitmq:\n", "      interval: 5s\n", "      interval: 40s\n"},
	} {
		i := strings.Index(broken, defect.after)
		j := strings.Index(broken[max(i, 0):], defect.old)
		if i < 0 || j < 0 {
			t.Fatalf("docker-compose.yml changed: no %q after %q; update this test", defect.old, defect.after)
		}
		broken = broken[:i+j] + defect.new + broken[i+j+len(defect.old):]
	}
	file := filepath.Join(t.TempDir(), "docker-compose.yml")
	if err := os.WriteFile(file, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	p := newProject(t, "walboxbroken", file)
	t.Cleanup(func() { down(t, p) })
	problems, timeline := up(t.Context(), p, time.Minute)
	t.Logf("timeline:\n%s", timeline)
	report := strings.Join(problems, "\n")
	t.Logf("the harness reports:\n%s", report)
	if !strings.Contains(report, "service walbox") || !strings.Contains(report, "WALBOX_AMQP_URL") {
		t.Errorf("the report does not name walbox and the missing WALBOX_AMQP_URL")
	}
	// The report must say so, and the timeline must show it.
	started := regexp.MustCompile(`(?m)^\s*\S+ notifier\s+start$`).FindStringIndex(timeline)
	healthy := regexp.MustCompile(`(?m)^\s*\S+ rabbitmq\s+health_status: healthy$`).FindStringIndex(timeline)
	early := started != nil && (healthy == nil || started[0] < healthy[0])
	said := strings.Contains(report, "service notifier started at") && strings.Contains(report, "before rabbitmq was healthy")
	if !early || !said {
		t.Errorf("notifier started before rabbitmq was healthy: %t; the report says so: %t; want both", early, said)
	}
}

// down removes the project (t.Context has ended by the time cleanups run).
func down(t *testing.T, p *dockerenv.Project) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := p.Down(ctx); err != nil {
		t.Logf("docker-compose down: %v", err)
	}
}
