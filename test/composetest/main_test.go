//go:build compose

package composetest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/walbox/walbox/test/dockerenv"
)

// Set up by TestMain for every test: the engine, the images and the compose project.
var (
	engine   *dockerenv.Engine
	images   dockerenv.Images
	repo     string
	missing  error // what the machine lacks to run the harness at all
	setupErr error // why the engine or the images could not be set up on a machine that has it all
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	repo, _ = filepath.Abs(filepath.Join("..", ".."))
	if missing = requirements(); missing != nil {
		return m.Run() // each test skips or fails with the reason
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTime())
	defer cancel()
	start := time.Now()
	if engine, setupErr = dockerenv.StartEngine(ctx); setupErr != nil {
		return m.Run()
	}
	defer engine.Stop()
	stopOnSignal(engine)
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "composetest: "+format+"\n", args...) }
	driver, _ := engine.Docker(ctx, "info", "--format", "{{.Driver}}")
	logf("engine up, storage driver %s", driver)
	cache, err := dockerenv.DefaultCache()
	if err != nil {
		setupErr = err
		return m.Run()
	}
	b := dockerenv.Builder{Engine: engine, Repo: repo, Cache: cache, Logf: logf}
	if images, setupErr = b.Build(ctx); setupErr != nil {
		return m.Run()
	}
	logf("engine and images ready in %v", time.Since(start).Round(time.Second))
	code := m.Run()
	if shared != nil {
		// The setup's deadline has usually passed by now: taking the stack down gets its own.
		downCtx, cancelDown := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancelDown()
		if err := shared.Down(downCtx); err != nil {
			logf("docker-compose down: %v", err)
		}
	}
	return code
}

// testsNeed is what the tests need after the setup: they took 10 minutes on two busy cores (13
// with vfs storage).
const testsNeed = 25 * time.Minute

// setupTime returns how long the engine and the images may take to set up: what go test's
// -timeout leaves after the tests (a cold setup took 8 minutes with vfs storage on two busy
// cores, 26 on a busier machine).
func setupTime() time.Duration {
	flag.Parse()
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, ok := f.Value.(flag.Getter).Get().(time.Duration); ok && d > testsNeed {
			return d - testsNeed
		}
	}
	return 45 * time.Minute
}

// stopOnSignal stops the engine, and with it every container, when the tests are interrupted.
func stopOnSignal(e *dockerenv.Engine) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "composetest: %v: stopping the Docker engine\n", sig)
		e.Stop()
		os.Exit(2)
	}()
}

// requirements reports what the harness lacks to run an engine and build images.
func requirements() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the Docker engine and debootstrap need root")
	}
	for _, bin := range []string{"dockerd", "docker-compose", "debootstrap"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found; .ci/install-deps.sh installs it", bin)
		}
	}
	return nil
}

// requireEngine fails the test when the engine or the images could not be set up, and when the
// machine lacks what the harness needs skips it outside CI and fails it under CI.
func requireEngine(t *testing.T) {
	t.Helper()
	if setupErr != nil {
		t.Fatalf("compose harness: %v", setupErr)
	}
	if missing == nil {
		return
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("compose harness (CI=true): %v", missing)
	}
	t.Skipf("compose harness: %v", missing)
}

// newProject returns a project of the compose file with the local images; the caller removes it.
func newProject(t *testing.T, name, file string) *dockerenv.Project {
	t.Helper()
	requireEngine(t)
	return &dockerenv.Project{Engine: engine, Name: name, Dir: repo, Files: []string{file}, Env: []string{
		"WALBOX_POSTGRES_IMAGE=" + images.Postgres,
		"WALBOX_RABBITMQ_IMAGE=" + images.RabbitMQ,
		"WALBOX_GO_IMAGE=" + images.Go,
		"WALBOX_IMAGE=" + images.Walbox,
		// The machine's own servers may hold the usual ports: publish on free loopback ports.
		"WALBOX_POSTGRES_PORT=127.0.0.1:0", "WALBOX_AMQP_PORT=127.0.0.1:0",
		"WALBOX_RABBITMQ_UI_PORT=127.0.0.1:0", "WALBOX_ORDERS_PORT=127.0.0.1:0",
	}}
}
