package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The table is well formed: each row names real commands, a flag has one row per command, and the
// rows of one flag agree on what the config file's single value means.
func TestSettingTableIsConsistent(t *testing.T) {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	first := map[string]spec{}
	taken := map[string]bool{}
	for _, g := range settingTable {
		for _, sp := range g.specs {
			if sp.flag == "" || sp.help == "" || len(sp.cmds) == 0 || sp.bind == nil {
				t.Errorf("--%s: want a name, a description, a command and a field it binds to", sp.flag)
			}
			if sp.env != "" && !strings.HasPrefix(sp.env, "WALBOX_") {
				t.Errorf("--%s: environment variable %s lacks the WALBOX_ prefix", sp.flag, sp.env)
			}
			if strings.Contains(sp.help+sp.unset, "|") {
				t.Errorf("--%s: a | breaks the docs' table", sp.flag)
			}
			for _, cmd := range sp.cmds {
				if !slices.Contains(names, cmd) {
					t.Errorf("--%s: no command %q", sp.flag, cmd)
				}
				if taken[cmd+" "+sp.flag] {
					t.Errorf("--%s: two rows for walbox %s", sp.flag, cmd)
				}
				taken[cmd+" "+sp.flag] = true
				if sp.with != "" && !slices.ContainsFunc(specsOf(cmd), func(o spec) bool { return o.flag == sp.with }) {
					t.Errorf("--%s: works only with --%s, which walbox %s does not take", sp.flag, sp.with, cmd)
				}
			}
			if f, ok := first[sp.flag]; ok && (f.def != sp.def || f.isBool != sp.isBool) {
				t.Errorf("--%s: rows disagree on the default (%q, %q) or on being a switch", sp.flag, f.def, sp.def)
			}
			first[sp.flag] = sp
		}
	}
}

// Every setting of the table is a flag of each of its commands, with its environment variable in
// --help, and nothing else is.
func TestEveryCommandHasItsFlags(t *testing.T) {
	flagName := regexp.MustCompile(`(?m)^  -([a-z-]+)`)
	for _, c := range commands {
		var out bytes.Buffer
		if code := mainWithExit(context.Background(), []string{c.name, "--help"}, &out, &out); code != 0 {
			t.Fatalf("walbox %s --help exited %d", c.name, code)
		}
		var got, want []string
		for _, m := range flagName.FindAllStringSubmatch(out.String(), -1) {
			got = append(got, m[1])
		}
		for _, sp := range specsOf(c.name) {
			want = append(want, sp.flag)
			if sp.env != "" && !strings.Contains(out.String(), "(env "+sp.env+" or "+sp.env+"_FILE)") {
				t.Errorf("walbox %s --help does not name %s", c.name, sp.env)
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("walbox %s --help lists\n  %v\nwant the table's\n  %v", c.name, got, want)
		}
	}
}

// Every setting of every command is read from its flag, its environment variable, the file its
// NAME_FILE names, and its key in the config file (--config itself excepted).
func TestEverySettingFromEverySource(t *testing.T) {
	empty := writeFile(t, "empty.yaml", "")
	for _, c := range commands {
		for _, sp := range specsOf(c.name) {
			want := "from-" + sp.flag
			if sp.flag == "config" {
				want = empty
			}
			sources := []struct {
				name string
				set  func(t *testing.T) []string // returns the arguments
			}{
				{"flag", func(*testing.T) []string { return []string{"--" + sp.flag + "=" + want} }},
				{"environment", func(t *testing.T) []string { t.Setenv(sp.env, want); return nil }},
				{"NAME_FILE", func(t *testing.T) []string {
					t.Setenv(sp.env+"_FILE", writeFile(t, "secret", want+"\n"))
					return nil
				}},
				{"config file", func(t *testing.T) []string {
					t.Setenv("WALBOX_CONFIG", writeFile(t, "walbox.yaml", sp.flag+": "+want+"\n"))
					return nil
				}},
			}
			for _, src := range sources {
				if sp.env == "" && src.name != "flag" && src.name != "config file" || sp.flag == "config" && src.name == "config file" {
					continue
				}
				t.Run(c.name+"/"+sp.flag+"/"+src.name, func(t *testing.T) {
					clearEnv(t)
					s := newSettings(c.name)
					fs := newFlagSet(c.name, "test", io.Discard)
					s.register(fs)
					if err := parse(fs, src.set(t)); err != nil {
						t.Fatal(err)
					}
					if err := s.resolve(); err != nil {
						t.Fatal(err)
					}
					if got := s.get(sp.flag).value; got != want {
						t.Errorf("got %q, want %q", got, want)
					}
				})
			}
		}
	}
}

// clearEnv unsets every environment variable of the table, and its NAME_FILE, for this test.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, g := range settingTable {
		for _, sp := range g.specs {
			if sp.env == "" {
				continue
			}
			for _, name := range []string{sp.env, sp.env + "_FILE"} {
				t.Setenv(name, "")
				os.Unsetenv(name)
			}
		}
	}
}

// --help names no flag's argument after words of its description: a switch takes none, every
// other flag a value.
func TestHelpTakesNoArgumentNameFromTheDescription(t *testing.T) {
	flagLine := regexp.MustCompile(`(?m)^  -([a-z-]+)(.*)$`)
	for _, c := range commands {
		var out bytes.Buffer
		if code := mainWithExit(context.Background(), []string{c.name, "--help"}, &out, &out); code != 0 {
			t.Fatalf("walbox %s --help exited %d", c.name, code)
		}
		for _, m := range flagLine.FindAllStringSubmatch(out.String(), -1) {
			if m[2] != "" && m[2] != " value" {
				t.Errorf("walbox %s --help: -%s%s, want -%s or -%s value", c.name, m[1], m[2], m[1], m[1])
			}
		}
	}
}

// A row the table marks required is one the command refuses to start without: exit 2 and one
// line naming the flag, before it dials anything (the others given, unreachable).
func TestRequiredSettingsAreRequired(t *testing.T) {
	given := map[string]string{"database-url": "postgres://u@127.0.0.1:1/db?connect_timeout=1",
		"amqp-url": "amqp://127.0.0.1:1", "older-than": "1h", "shards": "2"}
	for _, c := range commands {
		for _, missing := range specsOf(c.name) {
			if !missing.required {
				continue
			}
			t.Run(c.name+"/"+missing.flag, func(t *testing.T) {
				clearEnv(t)
				var args []string
				for _, sp := range specsOf(c.name) {
					if sp.required && sp.flag != missing.flag {
						v, ok := given[sp.flag]
						if !ok {
							t.Fatalf("no value to give --%s", sp.flag)
						}
						args = append(args, "--"+sp.flag+"="+v)
					}
				}
				var out bytes.Buffer
				code := mainWithExit(context.Background(), append([]string{c.name}, args...), &out, &out)
				msg := strings.TrimSuffix(out.String(), "\n")
				if code != 2 || strings.Contains(msg, "\n") || !strings.Contains(msg, "--"+missing.flag) || !strings.Contains(msg, "required") {
					t.Errorf("walbox %s %v exited %d:\n%s\nwant 2 and one line: --%s required", c.name, args, code, out.String(), missing.flag)
				}
			})
		}
	}
}
