package migrations

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// Every function the migrations create pins its search_path, so that its body means the same
// whoever calls it and whatever the caller's path: a role that may CREATE in a schema on the path
// cannot put its own function or table under a name the body uses.
func TestEveryFunctionPinsItsSearchPath(t *testing.T) {
	create := regexp.MustCompile(`(?is)CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(\S+?)\(.*?\bAS\s+\$\$`)
	found := 0
	for _, fsys := range []fs.FS{outboxFS, registryFS, consumerFS} {
		err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := fs.ReadFile(fsys, path)
			if err != nil {
				return err
			}
			for _, m := range create.FindAllStringSubmatch(string(data), -1) {
				found++
				if !strings.Contains(m[0], "SET search_path = pg_catalog, pg_temp") {
					t.Errorf("%s: function %s does not SET search_path = pg_catalog, pg_temp", path, m[1])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if found < 6 {
		t.Errorf("found %d functions in the migrations, want at least 6: is the pattern right?", found)
	}
}
