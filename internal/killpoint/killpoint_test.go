package killpoint_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/killpoint"
)

// Every point listed is hit in exactly one place of the product's code, and the code hits no
// point that is not listed: the fault test kills at each listed point.
func TestEveryPointIsPlacedOnce(t *testing.T) {
	call := regexp.MustCompile(`killpoint\.Hit\(("[^"]*"|[^)]*)\)`)
	seen := map[string]int{}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "../.." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			name := strings.Trim(m[1], `"`)
			if !strings.HasPrefix(m[1], `"`) {
				t.Errorf("%s: killpoint.Hit(%s): name the point with a string literal", path, m[1])
			}
			seen[name]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range killpoint.Points {
		if seen[p] != 1 {
			t.Errorf("point %q is hit in %d places, want 1", p, seen[p])
		}
	}
	for name := range seen {
		if !slices.Contains(killpoint.Points, name) {
			t.Errorf("point %q is hit but not listed in killpoint.Points", name)
		}
	}
}
