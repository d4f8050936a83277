// Command repocheck checks what `make check` cannot see in the code: the size of the front-door
// documentation, and that no build output is tracked. Run it from the repository root.
//
// The documentation's limits are those of issue 22: README.md at most 200 lines, with
// `docker compose up` in its first 45; its prose at most 20 words a sentence on average and no more
// than three sentences over 40 words; the prose of docs/ at most 22 words a sentence on average;
// docs/performance.md at most 150 lines. Tracked files are at most 2 MB and none is an
// executable binary.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
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
	files, err := checkTracked(root)
	if err != nil {
		return nil, err
	}
	return append(docs, files...), nil
}
