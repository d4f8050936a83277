package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The limits of the front-door documentation.
const (
	readmeMaxLines       = 200
	readmeQuickStartLine = 45 // `docker compose up` appears by this line
	readmeMaxPerSentence = 20.0
	readmeMaxLong        = 3
	docsMaxPerSentence   = 22.0
	performanceMaxLines  = 150
)

// checkDocs measures README.md and docs/ against the limits and returns what exceeds them.
func checkDocs(root string, verbose bool, out io.Writer) ([]string, error) {
	var problems []string
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return nil, err
	}
	text := string(readme)
	st := measureProse(text)
	lines := countLines(text)
	fmt.Fprintf(out, "README.md: %d lines, %.1f words a sentence, %d sentences over 40 words\n",
		lines, st.perSentence(), st.long)
	if lines > readmeMaxLines {
		problems = append(problems, fmt.Sprintf("README.md has %d lines, more than %d", lines, readmeMaxLines))
	}
	if at := lineOf(text, "docker compose up"); at == 0 || at > readmeQuickStartLine {
		problems = append(problems, fmt.Sprintf("README.md: `docker compose up` is not within its first %d lines", readmeQuickStartLine))
	}
	if st.perSentence() > readmeMaxPerSentence {
		problems = append(problems, fmt.Sprintf("README.md averages %.1f words a sentence, more than %.0f", st.perSentence(), readmeMaxPerSentence))
	}
	if st.long > readmeMaxLong {
		problems = append(problems, fmt.Sprintf("README.md has %d sentences over 40 words, more than %d", st.long, readmeMaxLong))
	}

	all, perf, err := measureDocs(filepath.Join(root, "docs"), verbose, out)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "docs/: %.1f words a sentence (%d sentences), docs/performance.md: %d lines\n",
		all.perSentence(), all.sentences, perf)
	if all.perSentence() > docsMaxPerSentence {
		problems = append(problems, fmt.Sprintf("docs/ averages %.1f words a sentence, more than %.0f", all.perSentence(), docsMaxPerSentence))
	}
	if perf > performanceMaxLines {
		problems = append(problems, fmt.Sprintf("docs/performance.md has %d lines, more than %d", perf, performanceMaxLines))
	}
	return problems, nil
}

// measureDocs measures the prose of every markdown file under dir, and returns it with the number
// of lines of performance.md.
func measureDocs(dir string, verbose bool, out io.Writer) (proseStats, int, error) {
	var all proseStats
	perf := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		st := measureProse(string(data))
		if verbose {
			fmt.Fprintf(out, "  %s: %d lines, %.1f words a sentence (%d sentences, %d over 40 words)\n",
				path, countLines(string(data)), st.perSentence(), st.sentences, st.long)
		}
		all = all.add(st)
		if filepath.Base(path) == "performance.md" && filepath.Dir(path) == dir {
			perf = countLines(string(data))
		}
		return nil
	})
	return all, perf, err
}

func countLines(text string) int {
	return strings.Count(strings.TrimSuffix(text, "\n"), "\n") + 1
}

// lineOf returns the number of the first line holding s, or 0.
func lineOf(text, s string) int {
	for i, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			return i + 1
		}
	}
	return 0
}
