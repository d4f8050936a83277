package testenv_test

import (
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
	if got, want := testenv.ParseSourcesFile(sources), "http://main.example/debian/"; got != want {
		t.Errorf("from a .sources file: %q, want %q", got, want)
	}
	list := `# deb http://commented.example/debian bookworm main
deb-src http://src.example/debian bookworm main
deb http://security.example/debian-security bookworm-security main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://list.example/debian bookworm main
`
	if got, want := testenv.ParseListFile(list), "http://list.example/debian"; got != want {
		t.Errorf("from a .list file: %q, want %q", got, want)
	}
	if got := testenv.ParseSourcesFile("Types: deb\nURIs: http://x.example/debian-security\nSuites: trixie-security\n"); got != "" {
		t.Errorf("security archive only: %q, want none", got)
	}
	t.Setenv(testenv.EnvDebianMirror, "http://env.example/debian/")
	if got, err := testenv.DebianMirror(); err != nil || got != "http://env.example/debian" {
		t.Errorf("with %s set: %q, %v", testenv.EnvDebianMirror, got, err)
	}
}
