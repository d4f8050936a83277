package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The compose file must be valid, and every WALBOX_ setting it passes must be one walbox knows.
func TestComposeFile(t *testing.T) {
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("docker-compose is not installed; .ci/install-deps.sh installs it")
		}
		t.Skip("docker-compose is not installed")
	}
	file := filepath.Join("..", "..", "docker-compose.yml")
	out, err := exec.Command(bin, "-f", file, "--profile", "test", "--profile", "shards", "config").CombinedOutput()
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	services, err := exec.Command(bin, "-f", file, "--profile", "test", "--profile", "shards", "config", "--services").Output()
	if err != nil {
		t.Fatalf("docker-compose config --services: %v", err)
	}
	for _, want := range []string{"postgres", "rabbitmq", "walbox-migrate", "walbox", "orders", "notifier", "test",
		"walbox-migrate-shards", "walbox-shard-0", "walbox-shard-1", "shards-load"} {
		if !slices.Contains(strings.Fields(string(services)), want) {
			t.Errorf("docker-compose.yml has no service %q (has %s)", want, strings.Fields(string(services)))
		}
	}
	config := string(out)
	for _, want := range []string{
		"wal_level=logical",                                // PostgreSQL as walbox needs it
		"WALBOX_TEST_DATABASE_URL", "WALBOX_TEST_AMQP_URL", // the test profile's external mode
		"ORDERS_DATABASE_URL", "ORDERS_LISTEN", // what examples/cmd/orders reads
		"NOTIFIER_DATABASE_URL", "NOTIFIER_AMQP_URL", // what examples/cmd/notifier reads
		"service_completed_successfully", "service_healthy", // start order
	} {
		if !strings.Contains(config, want) {
			t.Errorf("docker-compose.yml lacks %s", want)
		}
	}
	var help strings.Builder
	for _, cmd := range []string{"run", "migrate", "status"} {
		h, _ := exec.Command(walboxBin(t), cmd, "--help").CombinedOutput()
		help.Write(h)
	}
	for _, name := range regexp.MustCompile(`WALBOX_[A-Z_]+`).FindAllString(string(out), -1) {
		if strings.HasPrefix(name, "WALBOX_TEST_") {
			continue // the test harness's, not walbox's
		}
		if !strings.Contains(help.String(), name) {
			t.Errorf("docker-compose.yml sets %s, which no walbox command reads", name)
		}
	}
}
