package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// EnvDebianMirror names the Debian mirror that debootstrap and apt read from, overriding the one
// in the machine's apt sources.
const EnvDebianMirror = "WALBOX_DEBIAN_MIRROR"

// aptSources are the files apt reads its sources from, one-line and deb822 style.
var aptSources = []string{"/etc/apt/sources.list", "/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources"}

// DebianMirror returns the Debian mirror to build root file systems from: WALBOX_DEBIAN_MIRROR if
// set, else, on a Debian machine, the first source in its apt sources of Debian's own archive: a
// `deb` entry for the machine's release (its codename or an alias such as stable) with the
// component main. Security archives, disabled entries and archives of others (a codename with a
// suffix, other components) are passed over.
func DebianMirror() (string, error) {
	if m := os.Getenv(EnvDebianMirror); m != "" {
		return strings.TrimRight(m, "/"), nil
	}
	id, codename := osRelease(osReleaseFile)
	if id != "debian" {
		return "", fmt.Errorf("this machine is %q, not Debian, so its apt sources name no Debian mirror; set %s", id, EnvDebianMirror)
	}
	for _, pattern := range aptSources {
		files, _ := filepath.Glob(pattern)
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			parse := parseListFile
			if strings.HasSuffix(f, ".sources") {
				parse = parseSourcesFile
			}
			if m := parse(string(data), codename); m != "" {
				return strings.TrimRight(m, "/"), nil
			}
		}
	}
	return "", fmt.Errorf("no Debian mirror for %s in the apt sources (%s); set %s", codename, strings.Join(aptSources, ", "), EnvDebianMirror)
}

// osReleaseFile names the machine's operating system.
const osReleaseFile = "/etc/os-release"

// osRelease returns the ID and VERSION_CODENAME of an os-release file.
func osRelease(path string) (id, codename string) {
	data, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, "=")
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			id = v
		case "VERSION_CODENAME":
			codename = v
		}
	}
	return id, codename
}

// debianAliases are the suite names Debian's archive gives its releases besides their codenames.
var debianAliases = []string{"oldstable", "stable", "testing", "unstable", "sid"}

// mainArchive reports whether a source of these suites and components is Debian's own archive of
// the release named codename.
func mainArchive(uri string, suites, components []string, codename string) bool {
	if strings.Contains(uri, "security") || !strings.HasPrefix(uri, "http") || !slices.Contains(components, "main") {
		return false
	}
	for _, s := range suites {
		if (codename != "" && s == codename) || slices.Contains(debianAliases, s) {
			return true
		}
	}
	return false
}

// parseListFile reads `deb [options] URI suite components...` lines.
func parseListFile(data, codename string) string {
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[0] != "deb" {
			continue
		}
		fields = fields[1:]
		if strings.HasPrefix(fields[0], "[") { // options, up to the closing bracket
			for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
				fields = fields[1:]
			}
			if len(fields) > 0 {
				fields = fields[1:]
			}
		}
		if len(fields) >= 3 && mainArchive(fields[0], fields[1:2], fields[2:], codename) {
			return fields[0]
		}
	}
	return ""
}

// parseSourcesFile reads deb822 stanzas (Types, URIs, Suites, Components, Enabled).
func parseSourcesFile(data, codename string) string {
	for _, stanza := range strings.Split(strings.ReplaceAll(data, "\r\n", "\n"), "\n\n") {
		field := map[string]string{}
		for _, line := range strings.Split(stanza, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, " ") {
				field[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
		}
		if !strings.Contains(" "+field["types"]+" ", " deb ") || strings.EqualFold(field["enabled"], "no") {
			continue
		}
		suites, components := strings.Fields(field["suites"]), strings.Fields(field["components"])
		for _, uri := range strings.Fields(field["uris"]) {
			if mainArchive(uri, suites, components, codename) {
				return uri
			}
		}
	}
	return ""
}

// Debootstrap makes a minimal (minbase) Debian root file system of suite in root from mirror.
// A suite this debootstrap has no script for (a release newer than the machine's) uses the
// script of sid, which every newer suite follows.
func Debootstrap(ctx context.Context, suite, root, mirror string) error {
	args := []string{"--variant=minbase", suite, root, mirror}
	if _, err := os.Stat(filepath.Join("/usr/share/debootstrap/scripts", suite)); err != nil {
		args = append(args, "/usr/share/debootstrap/scripts/sid")
	}
	cmd := exec.CommandContext(ctx, "debootstrap", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("debootstrap %s: %w\n%s", suite, err, lastLines(string(out), 20))
	}
	return nil
}

// RemoveTree unmounts whatever is mounted below dir (innermost first), then removes it. It
// removes nothing if a mount stays: a bound /dev must never be emptied.
func RemoveTree(dir string) error {
	dir = filepath.Clean(dir)
	for _, m := range mountsBelow(dir) {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	if left := mountsBelow(dir); len(left) > 0 {
		return fmt.Errorf("remove %s: still mounted: %s", dir, strings.Join(left, " "))
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// mountsBelow lists the mount points under dir, innermost (last mounted) first.
func mountsBelow(dir string) []string {
	data, _ := os.ReadFile("/proc/self/mounts")
	lines := strings.Split(string(data), "\n")
	var out []string
	for i := len(lines) - 1; i >= 0; i-- {
		fields := strings.Fields(lines[i])
		if len(fields) > 1 && (fields[1] == dir || strings.HasPrefix(fields[1], dir+"/")) {
			out = append(out, fields[1])
		}
	}
	return out
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
