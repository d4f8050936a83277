package main

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/walbox/walbox/internal/testenv"
)

// harness adapts internal/testenv, whose server starters take a testing.TB, to a program:
// Fatal and Skip end the calling goroutine with an error, and cleanups run at close.
// Methods testenv does not use are left to the embedded nil TB and must not be called.
type harness struct {
	testing.TB

	mu       sync.Mutex
	err      error
	cleanups []func()
}

func (h *harness) Helper()                   {}
func (h *harness) Name() string              { return "demo" }
func (h *harness) Logf(string, ...any)       {}
func (h *harness) Fatal(args ...any)         { h.fail(fmt.Sprint(args...)) }
func (h *harness) Fatalf(f string, a ...any) { h.fail(fmt.Sprintf(f, a...)) }
func (h *harness) Skipf(f string, a ...any)  { h.fail(fmt.Sprintf(f, a...)) }
func (h *harness) Errorf(f string, a ...any) { h.setErr(fmt.Sprintf(f, a...)) }
func (h *harness) Failed() bool              { h.mu.Lock(); defer h.mu.Unlock(); return h.err != nil }
func (h *harness) Cleanup(f func())          { h.mu.Lock(); h.cleanups = append(h.cleanups, f); h.mu.Unlock() }
func (h *harness) fail(msg string)           { h.setErr(msg); runtime.Goexit() }
func (h *harness) setErr(msg string) {
	h.mu.Lock()
	h.err = errors.Join(h.err, errors.New(msg))
	h.mu.Unlock()
}
func (h *harness) takeErr() (err error) {
	h.mu.Lock()
	err, h.err = h.err, nil
	h.mu.Unlock()
	return err
}
func (h *harness) setCleanups(fs []func())    { h.mu.Lock(); h.cleanups = fs; h.mu.Unlock() }
func (h *harness) getCleanups() (fs []func()) { h.mu.Lock(); fs = h.cleanups; h.mu.Unlock(); return fs }

// do runs f on a goroutine of its own, so that a Fatal in it ends only that goroutine, and
// returns the failure, if any.
func (h *harness) do(f func()) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
	return h.takeErr()
}

// close runs the cleanups, last registered first: it stops the servers and removes their
// directories.
func (h *harness) close() {
	fs := h.getCleanups()
	h.setCleanups(nil)
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// servers are the throwaway PostgreSQL and RabbitMQ the demo runs against.
type servers struct {
	pg     *testenv.Postgres
	rabbit *testenv.Rabbit
}

// startServers starts PostgreSQL (wal_level=logical) and a RabbitMQ node of their own, on free
// ports, from the local binaries.
func startServers(h *harness) (servers, error) {
	var s servers
	if err := h.do(func() { s.pg = testenv.StartPostgres(h) }); err != nil {
		return s, fmt.Errorf("start postgres: %w", err)
	}
	if err := h.do(func() { s.rabbit = testenv.StartRabbit(h) }); err != nil {
		return s, fmt.Errorf("start rabbitmq: %w", err)
	}
	return s, nil
}
