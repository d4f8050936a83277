package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Ports for the servers come from below the kernel's ephemeral range. A port there is never
// the local port of an outgoing connection. So a node that closes its listener for a while
// (stop_app, then join_cluster) finds its port free again. Test binaries run side by side.
// Each reserves its ports with a lock on a file named after the port, held until it exits.

// portsBelow is how many ports under the ephemeral range the harness picks from.
const portsBelow = 10000

// portLockDir holds one lock file per port a test binary reserved.
const portLockDir = "walbox-test-ports"

var ports struct {
	mu   sync.Mutex
	held map[int]*os.File // the lock of each port this process reserved
	span [2]int           // [low, high) to pick from, set on first use
}

// freePort returns a TCP port of 127.0.0.1 this process reserved: free a moment ago, out of the
// ephemeral range and locked against other test binaries. It is never handed out twice. A
// server that still fails to bind it (another program took it) is retried on a new one.
func freePort() (int, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.held == nil {
		ports.held = map[int]*os.File{}
		ports.span = portRange()
	}
	low, high := ports.span[0], ports.span[1]
	dir := filepath.Join(os.TempDir(), portLockDir)
	if high == low || os.MkdirAll(dir, 0o777) != nil {
		return ephemeralPort()
	}
	_ = os.Chmod(dir, 0o1777) // test binaries of other users share it
	n := high - low
	first := rand.IntN(n)
	for i := range n {
		port := low + (first+i)%n
		if ports.held[port] != nil {
			continue
		}
		f, ok := lockPort(dir, port)
		if !ok {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			_ = f.Close() // another program has it; the lock goes with the descriptor
			continue
		}
		_ = l.Close()
		ports.held[port] = f
		return port, nil
	}
	return ephemeralPort() // every port of the range taken: fall back to the kernel's choice
}

// lockPort takes the lock of port in dir without waiting. The open file holds it.
func lockPort(dir string, port int) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, false
	}
	_ = f.Chmod(0o666)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, false
	}
	return f, true
}

// portRange returns the portsBelow ports just under the ephemeral range, or a range of 0 ports
// when that would reach the privileged ones.
func portRange() [2]int {
	low := 32768 // Linux's default start of the ephemeral range
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				low = v
			}
		}
	}
	if low-portsBelow < 1024 {
		return [2]int{low, low}
	}
	return [2]int{low - portsBelow, low}
}

// ephemeralPort returns a port the kernel picks, free a moment ago but not reserved.
func ephemeralPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
