package cli

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/template"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md from settingTable")

var (
	configurationDoc  = filepath.Join("..", "..", "docs", "configuration.md")
	configurationTmpl = filepath.Join("testdata", "configuration.md.tmpl")
)

// docs/configuration.md is what settingTable and its template generate: a changed setting changes
// the page, or this test fails. -update rewrites the page (go generate ./internal/cli).
func TestConfigurationDoc(t *testing.T) {
	got, err := generateConfigurationDoc(configurationTmpl)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(configurationDoc, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs from what settingTable generates (first difference at line %d); "+
			"run go generate ./internal/cli and commit the page", configurationDoc, firstDiffLine(got, string(want)))
	}
}

// A changed description changes the page: the comparison above sees settingTable.
func TestConfigurationDocFollowsTheTable(t *testing.T) {
	before, err := generateConfigurationDoc(configurationTmpl)
	if err != nil {
		t.Fatal(err)
	}
	saved := settingTable
	t.Cleanup(func() { settingTable = saved })
	settingTable = slices.Clone(saved)
	settingTable[0].specs = slices.Clone(saved[0].specs)
	settingTable[0].specs[1].help = "a description changed in the table"
	after, err := generateConfigurationDoc(configurationTmpl)
	if err != nil {
		t.Fatal(err)
	}
	if after == before || !strings.Contains(after, "a description changed in the table") {
		t.Fatalf("the page does not follow a changed description")
	}
}

func firstDiffLine(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

// generateConfigurationDoc fills the template's {{.Settings}} with a table per group of settingTable.
func generateConfigurationDoc(tmplPath string) (string, error) {
	tmpl, err := template.ParseFiles(tmplPath)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = tmpl.Execute(&b, struct{ Settings string }{settingsReference()})
	return b.String(), err
}

func settingsReference() string {
	var b strings.Builder
	for i, g := range settingTable {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "### %s\n\n| flag | environment | default | commands | meaning |\n|---|---|---|---|---|\n", g.title)
		for _, sp := range g.specs {
			env := ""
			if sp.env != "" {
				env = "`" + sp.env + "`"
			}
			fmt.Fprintf(&b, "| `--%s` | %s | %s | %s | %s |\n", sp.flag, env, docDefault(sp), docCommands(sp.cmds), docMeaning(sp))
		}
	}
	return b.String()
}

func docDefault(sp spec) string {
	switch {
	case sp.def != "":
		return "`" + sp.def + "`"
	case sp.required:
		return "(required)"
	}
	return sp.unset
}

func docCommands(cmds []string) string {
	if slices.Equal(cmds, allCommands) {
		return "all"
	}
	return "`" + strings.Join(cmds, "`, `") + "`"
}

func docMeaning(sp spec) string {
	if sp.see == "" {
		return sp.help
	}
	text, _, _ := strings.Cut(sp.see, "#")
	if text == "" {
		text = "below"
	}
	return sp.help + " ([" + text + "](" + sp.see + "))"
}
