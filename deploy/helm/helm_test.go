package chart_test

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// helmVersion is the Helm the chart is tested with, built from the Go module proxy.
const helmVersion = "v3.22.0"

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm returns the path of a Helm binary of helmVersion: $WALBOX_HELM if set, else one built
// once into the user's cache directory (about 75 s on two cores) and reused after that.
func helm(tb testing.TB) string {
	tb.Helper()
	helmOnce.Do(func() { helmPath, helmErr = findOrBuildHelm() })
	if helmErr != nil {
		tb.Fatalf("helm %s: %v", helmVersion, helmErr)
	}
	return helmPath
}

func findOrBuildHelm() (string, error) {
	if p := os.Getenv("WALBOX_HELM"); p != "" {
		return p, checkHelmVersion(p)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir() // no HOME: still build only once per machine
	}
	dir := filepath.Join(cache, "walbox", "helm-"+helmVersion)
	bin := filepath.Join(dir, "helm")
	if checkHelmVersion(bin) == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Build into a directory of our own, then rename: a concurrent run never sees half a binary.
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "install", "helm.sh/helm/v3/cmd/helm@"+helmVersion)
	cmd.Dir = tmp // outside any module: go install pkg@version uses Helm's own go.mod
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install helm: %v\n%s", err, out)
	}
	if err := os.Rename(filepath.Join(tmp, "helm"), bin); err != nil {
		return "", err
	}
	return bin, checkHelmVersion(bin)
}

// checkHelmVersion accepts a binary built from helm.sh/helm/v3 at helmVersion (go install leaves
// Helm's own version string at "v3.22", so the module version in the build information is what
// tells), or one that reports helmVersion itself (a release build given as $WALBOX_HELM).
func checkHelmVersion(bin string) error {
	if info, err := buildinfo.ReadFile(bin); err == nil && info.Main.Path == "helm.sh/helm/v3" && info.Main.Version == helmVersion {
		return nil
	}
	out, err := exec.Command(bin, "version", "--template", "{{.Version}}").Output()
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(string(out)); got != helmVersion {
		return fmt.Errorf("%s is Helm %s, want %s", bin, got, helmVersion)
	}
	return nil
}

// runHelm runs helm with args and returns its standard output; standard error goes into the error.
func runHelm(tb testing.TB, args ...string) ([]byte, error) {
	tb.Helper()
	cmd := exec.Command(helm(tb), args...)
	// Keep Helm away from the user's repositories, plugins and kube config: it renders offline.
	home := tb.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "kubeconfig"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}
