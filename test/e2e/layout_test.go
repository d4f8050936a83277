package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Layout table of docs/architecture.md lists every package of the repository's modules
// (walbox's own, test/, examples/ and otel/), and lists them in an order in which each package's code
// (its tests aside) imports only packages above it, as the page says.
func TestArchitectureLayoutListsEveryPackageInImportOrder(t *testing.T) {
	const doc = "docs/architecture.md"
	root := filepath.Join("..", "..")
	text, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(text), "\n## Layout\n")
	if !ok {
		t.Fatal(doc + " has no Layout section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := map[string]int{} // package folder → its row in the table
	for i, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9/_-]+)/` \\|").FindAllStringSubmatch(section, -1) {
		row[m[1]] = i
	}

	const module = "github.com/walbox/walbox"
	var lines []string
	for _, dir := range []string{".", "test", "examples", "otel"} {
		cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
		cmd.Dir = filepath.Join(root, dir)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", dir, err)
		}
		lines = append(lines, strings.Split(strings.TrimSpace(string(out)), "\n")...)
	}
	for _, line := range lines {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module+"/")
		at, ok := row[pkg]
		if !ok {
			t.Errorf("%s's Layout table has no row for %s/", doc, pkg)
			continue
		}
		for _, imp := range fields[1:] {
			dep, ours := strings.CutPrefix(imp, module+"/")
			if ours && row[dep] >= at {
				t.Errorf("%s imports %s, which the Layout table lists below it", pkg, dep)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "deploy", "helm", "go.mod")); err == nil {
		if _, ok := row["deploy/helm"]; !ok {
			t.Error(doc + "'s Layout table has no row for deploy/helm/ (the chart's test module)")
		}
	}
}
