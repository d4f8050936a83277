package testenv

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
)

// Log collects a program's output; it is safe to read while the program writes to it.
type Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Tail returns the last lines of s, saying how many came before them.
func Tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = append([]string{fmt.Sprintf("... (%d lines before)", len(l)-lines)}, l[len(l)-lines:]...)
	}
	return strings.Join(l, "\n")
}
