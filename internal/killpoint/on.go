//go:build killpoints

package killpoint

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Enabled says whether walbox was built with kill points.
const Enabled = true

var (
	armed string       // the point named by WALBOX_KILL_POINT
	at    int64        // the hit that kills
	hits  atomic.Int64 // the armed point's hits so far
)

func init() {
	v := os.Getenv(Env)
	if v == "" {
		return
	}
	name, n, ok := strings.Cut(v, ":")
	if !ok {
		n = "1"
	}
	count, err := strconv.ParseInt(n, 10, 64)
	if err != nil || count < 1 || !slices.Contains(Points, name) {
		fmt.Fprintf(os.Stderr, "walbox: %s=%q: want name:N, N >= 1, name one of %s\n", Env, v, strings.Join(Points, ", "))
		os.Exit(2)
	}
	armed, at = name, count
}

// Hit counts a pass through the point name. At the armed hit, it writes one line to stderr and
// SIGKILLs the process: no deferred function or cleanup runs.
func Hit(name string) {
	if name != armed || hits.Add(1) != at {
		return
	}
	fmt.Fprintf(os.Stderr, "walbox: kill point %s hit %d: SIGKILL\n", name, at)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
