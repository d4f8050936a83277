package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	out, err := exec.Command(bin, "-f", file, "config").CombinedOutput()
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	var help strings.Builder
	for _, cmd := range []string{"run", "migrate", "status"} {
		h, _ := exec.Command(walboxBin, cmd, "--help").CombinedOutput()
		help.Write(h)
	}
	for _, name := range regexp.MustCompile(`WALBOX_[A-Z_]+`).FindAllString(string(out), -1) {
		if !strings.Contains(help.String(), name) {
			t.Errorf("docker-compose.yml sets %s, which no walbox command reads", name)
		}
	}
}
