package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// TreeCPU returns the CPU time used so far by the process pid and its descendants, by command:
// PostgreSQL and RabbitMQ servers a test started, and the programs it runs. Children already
// waited for count too, under their parent's command. A bench divides it by the messages moved.
// RabbitMQ's schedulers spin while they wait for work, so its figure grows with the wall time too.
// A PostgreSQL process counts under its role, from its title: "postgres: backend" for a client's,
// "postgres: walsender", "postgres: autovacuum", and "postgres" for the rest.
func TreeCPU(pid int) (map[string]time.Duration, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	ticks := map[int]int64{}
	commands := map[int]string{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		command, ppid, t, err := procStat(p)
		if err != nil {
			continue // gone meanwhile
		}
		children[ppid] = append(children[ppid], p)
		if command == "postgres" {
			command = postgresRole(p)
		}
		ticks[p], commands[p] = t, command
	}
	if _, ok := ticks[pid]; !ok {
		return nil, fmt.Errorf("process %d: not found in /proc", pid)
	}
	cpu := map[string]time.Duration{}
	for todo := []int{pid}; len(todo) > 0; {
		p := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], children[p]...)
		cpu[commands[p]] += time.Duration(ticks[p]) * clockTick
	}
	return cpu, nil
}

// postgresRole names a PostgreSQL process by its title, as TreeCPU counts it.
func postgresRole(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	title, ok := bytes.CutPrefix(b, []byte("postgres: "))
	switch {
	case err != nil || !ok: // the postmaster keeps its command line
		return "postgres"
	case bytes.HasPrefix(title, []byte("walsender ")):
		return "postgres: walsender"
	case bytes.HasPrefix(title, []byte("autovacuum ")):
		return "postgres: autovacuum"
	case postgresAuxiliary(string(title)):
		return "postgres"
	}
	return "postgres: backend" // "user database host state"
}

// postgresAuxiliary says whether a title is a server process's, not a client's.
func postgresAuxiliary(title string) bool {
	for _, p := range []string{"checkpointer", "background writer", "walwriter", "logical replication", "archiver", "startup", "walreceiver", "stats collector", "io worker", "walsummarizer", "slotsync"} {
		if strings.HasPrefix(title, p) {
			return true
		}
	}
	return false
}

// procStat reads the command and the parent of pid, and its CPU time in ticks: its own, and that
// of the children it waited for.
func procStat(pid int) (command string, ppid int, ticks int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, 0, err
	}
	// The command, in parentheses, may hold spaces: the fields follow its last ')'.
	i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if i < 0 || j < i {
		return "", 0, 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	command = string(b[i+1 : j])
	i = j
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state): ppid is field 4; utime, stime, cutime, cstime are fields 14 to 17.
	if len(f) < 15 {
		return "", 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	if ppid, err = strconv.Atoi(string(f[1])); err != nil {
		return "", 0, 0, fmt.Errorf("/proc/%d/stat: ppid: %w", pid, err)
	}
	for _, s := range f[11:15] {
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return "", 0, 0, fmt.Errorf("/proc/%d/stat: CPU time: %w", pid, err)
		}
		ticks += n
	}
	return command, ppid, ticks, nil
}

// PinTree binds the process pid, its descendants and each of their threads to one CPU. Processes
// they start later inherit it. A bench so gives a server cores of its own, as on a machine of its own.
func PinTree(pid, cpu int) error {
	for _, p := range append([]int{pid}, descendants(pid)...) {
		if out, err := exec.Command("taskset", "--all-tasks", "--cpu-list", "--pid", strconv.Itoa(cpu), strconv.Itoa(p)).CombinedOutput(); err != nil {
			return fmt.Errorf("pin process %d to CPU %d: %w: %s", p, cpu, err, bytes.TrimSpace(out))
		}
	}
	return nil
}
