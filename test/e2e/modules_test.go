package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A service that imports outbox and consumer, and nothing else of walbox, links neither the
// stream client nor walbox's metrics and tracing: the stream consumer is a package of its own
// (consumer/streamconsumer). docs/architecture.md gives the figures this test bounds.
func TestQueueConsumerProgramLinksNoStreamClient(t *testing.T) {
	// Measured 2026-11-28: 46 modules in go list -m all (56 while walbox's go.mod required the
	// OpenTelemetry exporter), 9 linked besides the program. Most of the 46 are walbox's own go.mod
	// requirements (Prometheus, the stream client): a program that requires walbox lists them all,
	// linked or not. The exporter lives in the otel module, which such a program does not require.
	const maxModules, maxLinked = 50, 10
	if os.Getenv("GOPROXY") == "off" {
		// The compose test profile runs offline; make test runs this with the module proxy.
		t.Skip("go list -m all needs the module proxy, and GOPROXY=off")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/service\n\ngo 1.26.8\n\nrequire github.com/walbox/walbox v0.0.0\n\n"+
		"replace github.com/walbox/walbox => "+root+"\n")
	write("main.go", "package main\n\nimport (\n\t_ \"github.com/walbox/walbox/consumer\"\n\t_ \"github.com/walbox/walbox/outbox\"\n)\n\nfunc main() {}\n")
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))
	gocmd := func(args ...string) []string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		return strings.Fields(string(out))
	}
	// -e: a module only the tests of a dependency import may be missing from an offline cache.
	gocmd("mod", "tidy", "-e")

	modules := len(gocmd("list", "-m", "-f", "{{.Path}}", "all"))
	if modules > maxModules {
		t.Errorf("go list -m all lists %d modules, want at most %d", modules, maxModules)
	}
	linked := map[string]bool{}
	for _, m := range gocmd("list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".") {
		linked[m] = true
	}
	delete(linked, "example.com/service")
	for _, heavy := range []string{"github.com/rabbitmq/rabbitmq-stream-go-client", "github.com/prometheus/client_golang",
		"go.opentelemetry.io/otel", "github.com/jackc/pglogrepl"} {
		if linked[heavy] {
			t.Errorf("the program links %s", heavy)
		}
	}
	if len(linked) > maxLinked {
		t.Errorf("the program links %d modules, want at most %d: %v", len(linked), maxLinked, linked)
	}
	t.Logf("%d modules in go list -m all, %d linked", modules, len(linked))
}
