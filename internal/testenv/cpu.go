package testenv

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// TreeCPU returns the CPU time used so far by the process pid and its descendants, by command:
// PostgreSQL and RabbitMQ servers a test started, and the programs it runs. Children already
// waited for count too, under their parent's command. A bench divides it by the messages moved.
// RabbitMQ's schedulers spin while they wait for work, so its figure grows with the wall time too.
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
