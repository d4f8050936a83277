package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat: 100 on every Linux platform
// Go supports.
const clockTicks = 100

// procTimes are the CPU times of one process, in seconds.
type procTimes struct {
	ppid     int
	self     float64 // utime + stime
	children float64 // cutime + cstime: reaped children
}

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (procTimes, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}, err
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procTimes{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	// After comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
	if len(f) < 15 {
		return procTimes{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	n := make([]float64, 4)
	for j := range n {
		v, err := strconv.ParseInt(f[11+j], 10, 64)
		if err != nil {
			return procTimes{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		n[j] = float64(v) / clockTicks
	}
	ppid, _ := strconv.Atoi(f[1])
	return procTimes{ppid: ppid, self: n[0] + n[1], children: n[2] + n[3]}, nil
}

// processCPU returns the CPU seconds of pid, or -1 when it cannot be read.
func processCPU(pid int) float64 {
	if pid <= 0 {
		return -1
	}
	t, err := readStat(pid)
	if err != nil {
		return -1
	}
	return t.self
}

// treeCPU returns the CPU seconds of pid, of its live children and of its reaped children: for
// the postmaster, the whole server including backends that have exited. -1 when unknown.
func treeCPU(pid int) float64 {
	if pid <= 0 {
		return -1
	}
	root, err := readStat(pid)
	if err != nil {
		return -1
	}
	total := root.self + root.children
	for _, child := range childPids(pid) {
		if t, err := readStat(child); err == nil {
			total += t.self
		}
	}
	return total
}

// childPids lists the direct children of pid.
func childPids(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if t, err := readStat(p); err == nil && t.ppid == pid {
			out = append(out, p)
		}
	}
	return out
}

// peakRSS returns VmHWM of pid in bytes, or -1.
func peakRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return -1
		}
		return kb << 10
	}
	return -1
}

// loadAvg returns the 1-minute load average, or -1.
func loadAvg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// LoadAvg returns the 1-minute load average from /proc/loadavg, or -1.
func LoadAvg() float64 { return loadAvg() }

// memTotal returns MemTotal in bytes, or -1.
func memTotal() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return -1
}

// cpuModel returns the first model name in /proc/cpuinfo.
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// writeCalls returns how many write system calls pid has made (syscw in /proc/<pid>/io), or -1
// when it cannot be read.
func writeCalls(pid int) int64 {
	if pid <= 0 {
		return -1
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
