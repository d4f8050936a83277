package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// maxTrackedBytes is the largest file the repository may track.
const maxTrackedBytes = 2 << 20

// binaryMagic are the first bytes of executable formats: ELF, Mach-O (both byte orders, 32 and 64
// bits, universal) and PE.
var binaryMagic = [][]byte{
	[]byte("\x7fELF"),
	{0xfe, 0xed, 0xfa, 0xce}, {0xce, 0xfa, 0xed, 0xfe},
	{0xfe, 0xed, 0xfa, 0xcf}, {0xcf, 0xfa, 0xed, 0xfe},
	{0xca, 0xfe, 0xba, 0xbe},
	[]byte("MZ"),
}

// checkTracked returns the tracked files that are larger than 2 MB or are executable binaries.
func checkTracked(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-s", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var problems []string
	for _, entry := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		meta, path, ok := strings.Cut(entry, "\t")
		if !ok {
			continue
		}
		if p := judgeTracked(filepath.Join(root, path), path, strings.HasPrefix(meta, "100755")); p != "" {
			problems = append(problems, p)
		}
	}
	return problems, nil
}

// judgeTracked says what is wrong with one tracked file, or "".
func judgeTracked(file, name string, executable bool) string {
	f, err := os.Open(file)
	if err != nil {
		return "" // deleted in the work tree: git status shows it
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || info.IsDir() {
		return ""
	}
	if info.Size() > maxTrackedBytes {
		return fmt.Sprintf("%s is tracked and has %d bytes, more than 2 MB", name, info.Size())
	}
	head := make([]byte, 4)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	for _, magic := range binaryMagic {
		if bytes.HasPrefix(head, magic) {
			return fmt.Sprintf("%s is tracked and is an executable binary: build output belongs in .gitignore", name)
		}
	}
	if executable && !bytes.HasPrefix(head, []byte("#!")) {
		return fmt.Sprintf("%s is tracked as executable but is not a script (no #!)", name)
	}
	return ""
}
