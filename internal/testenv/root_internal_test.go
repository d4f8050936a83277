package testenv

import (
	"path/filepath"
	"testing"
)

// A binary whose compiled-in source path is gone (built with -trimpath, or the checkout moved)
// finds the repository from the working directory, in it or below it.
func TestFindRootFallsBackToTheWorkingDirectory(t *testing.T) {
	root := repoRoot()
	if !isProductRoot(root) {
		t.Fatalf("repoRoot %s holds no go.mod of the product module", root)
	}
	gone := filepath.Join(t.TempDir(), "moved")
	for _, wd := range []string{root, filepath.Join(root, "examples", "cmd", "demo")} {
		if got := findRoot(gone, wd); got != root {
			t.Errorf("findRoot(gone, %s) = %s, want %s", wd, got, root)
		}
	}
	if got := findRoot(gone, t.TempDir()); got != gone {
		t.Errorf("outside the repository findRoot = %s, want the compiled path %s", got, gone)
	}
	if got := findRoot(root, t.TempDir()); got != root {
		t.Errorf("findRoot with the compiled path present = %s, want %s", got, root)
	}
}
