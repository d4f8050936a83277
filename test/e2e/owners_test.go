package e2e_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The package documentation names every test of the end-to-end packages (this one, test/faults
// and examples/examplee2e), and only those, so that the table of which package owns which
// scenario stays true.
func TestOwnershipTableNamesEveryEndToEndTest(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]string{}
	for _, dir := range []string{"test/e2e", "test/faults", "examples/examplee2e"} {
		files, _ := filepath.Glob(filepath.Join("..", "..", filepath.FromSlash(dir), "*_test.go"))
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`).FindAllSubmatch(src, -1) {
				tests[string(m[1])] = dir
			}
		}
	}
	if len(tests) == 0 {
		t.Fatal("found no tests in the end-to-end packages")
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bTest[A-Z]\w*`).FindAll(doc, -1) {
		named[string(m)] = true
	}
	for name, dir := range tests {
		if !named[name] && name != "TestOwnershipTableNamesEveryEndToEndTest" { // this check is no scenario
			t.Errorf("%s: %s is not in the ownership table of doc.go", dir, name)
		}
	}
	for name := range named {
		if _, ok := tests[name]; !ok && name != "TestMain" {
			t.Errorf("doc.go names %s, which no end-to-end package has", name)
		}
	}
}
