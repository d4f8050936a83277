// Command repocheck checks what `make check` cannot see in the code. It measures the front-door
// documentation and the sentences of Go comments, and checks that no build output is tracked.
// Run it from the repository root.
//
// The documentation's limits are those of issue 22:
//   - README.md has at most 200 lines, with `docker compose up` in its first 45.
//   - README.md's prose averages at most 20 words a sentence, with three sentences over 40 at most.
//   - The prose of docs/ averages at most 22 words a sentence.
//   - docs/performance.md has at most 150 lines.
//
// A sentence of a Go comment has at most 20 words, in every package of the product.
// Tracked files are at most 2 MB and none is an executable binary.
// See docs/testing.md for how sentences are counted, and docs/architecture.md for the other packages.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
)

func main() {
	verbose := flag.Bool("v", false, "print the measures of every file")
	flag.Parse()
	problems, err := run(".", *verbose, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "repocheck:", err)
		os.Exit(1)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "repocheck:", p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

func run(root string, verbose bool, out io.Writer) ([]string, error) {
	docs, err := checkDocs(root, verbose, out)
	if err != nil {
		return nil, err
	}
	comments, err := checkComments(root, verbose, out)
	if err != nil {
		return nil, err
	}
	files, err := checkTracked(root)
	if err != nil {
		return nil, err
	}
	return slices.Concat(docs, comments, files), nil
}
