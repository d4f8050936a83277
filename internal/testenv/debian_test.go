package testenv_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/walbox/walbox/internal/testenv"
)

// The mirror is Debian's main archive as apt's sources name it: not a security archive, not a
// disabled stanza, not a source package line.
func TestDebianMirrorFromAptSources(t *testing.T) {
	sources := `Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main

Types: deb
Enabled: no
URIs: http://disabled.example/debian
Suites: bookworm

Types: deb-src deb
# a comment: with a colon
URIs: http://main.example/debian/
Suites: bookworm bookworm-updates
Components: main
`
	if got, want := testenv.ParseSourcesFile(sources, "bookworm"), "http://main.example/debian/"; got != want {
		t.Errorf("from a .sources file: %q, want %q", got, want)
	}
	list := `# deb http://commented.example/debian bookworm main
deb-src http://src.example/debian bookworm main
deb http://security.example/debian-security bookworm-security main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://list.example/debian bookworm main
`
	if got, want := testenv.ParseListFile(list, "bookworm"), "http://list.example/debian"; got != want {
		t.Errorf("from a .list file: %q, want %q", got, want)
	}
	if got := testenv.ParseSourcesFile("Types: deb\nURIs: http://x.example/debian-security\nSuites: trixie-security\nComponents: main\n", "trixie"); got != "" {
		t.Errorf("security archive only: %q, want none", got)
	}
	t.Setenv(testenv.EnvDebianMirror, "http://env.example/debian/")
	if got, err := testenv.DebianMirror(); err != nil || got != "http://env.example/debian" {
		t.Errorf("with %s set: %q, %v", testenv.EnvDebianMirror, got, err)
	}
}

// Archives of others for Debian come before Debian's own in many machines' sources (their files
// sort first): a codename with a suffix, another suite, other components. They are passed over.
func TestDebianMirrorPassesOverOtherArchives(t *testing.T) {
	list := `deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.asc] https://docker.example/linux/debian bookworm stable
deb http://pgdg.example/pub/repos/apt bookworm-pgdg main
deb https://cloud.example/apt cloud-sdk main
deb https://node.example/node_20.x nodistro main
deb http://main.example/debian bookworm main contrib
`
	if got, want := testenv.ParseListFile(list, "bookworm"), "http://main.example/debian"; got != want {
		t.Errorf("from a .list file: %q, want %q", got, want)
	}
	sources := `Types: deb
URIs: https://node.example/node_20.x
Suites: nodistro
Components: main

Types: deb
URIs: http://main.example/debian
Suites: stable stable-updates
Components: main
`
	if got, want := testenv.ParseSourcesFile(sources, "bookworm"), "http://main.example/debian"; got != want {
		t.Errorf("a suite by its alias: %q, want %q", got, want)
	}
	if got := testenv.ParseListFile("deb http://archive.example/ubuntu noble main\n", "bookworm"); got != "" {
		t.Errorf("another release's archive: %q, want none", got)
	}
}

func TestOSRelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "os-release")
	data := "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_CODENAME=bookworm\nID=debian\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, codename := testenv.OSRelease(path); id != "debian" || codename != "bookworm" {
		t.Errorf("OSRelease = %q, %q; want debian, bookworm", id, codename)
	}
}
