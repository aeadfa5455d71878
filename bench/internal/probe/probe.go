// Package probe reads the figures the benchmark runner measures from outside
// a process: resident memory (VmRSS in /proc/PID/status), CPU time (utime
// and stime in /proc/PID/stat) and counters in Prometheus text exposition
// (the gateway's /metrics). The parsers are pure functions; the readers only
// open the /proc files. Everything here is safe for concurrent use.
package probe

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// UserHZ is the unit of the CPU times in /proc/PID/stat: the kernel reports
// them in clock ticks of USER_HZ, which is 100 per second on Linux.
const UserHZ = 100

// ErrProbeMissing is returned by the parsers when the field or metric asked
// for is not in the input (a process that exited, a metric not exported).
var ErrProbeMissing = errors.New("probe: value not found")

// ParseVmRSS returns the VmRSS line of a /proc/PID/status text in bytes.
func ParseVmRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("parse VmRSS %q: want \"N kB\"", rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 || kb > math.MaxInt64/1024 {
			return 0, fmt.Errorf("parse VmRSS %q: bad number", rest)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("parse status: VmRSS: %w", ErrProbeMissing)
}

// ParseCPU returns utime+stime of a /proc/PID/stat line as a duration. The
// command name (field 2) may hold spaces and parentheses, so the fields are
// counted from the last ')'.
func ParseCPU(stat []byte) (time.Duration, error) {
	user, sys, err := ParseCPUSplit(stat)
	return user + sys, err
}

// ParseCPUSplit returns the user and the system CPU time of a
// /proc/PID/stat line (utime and stime), apart.
func ParseCPUSplit(stat []byte) (user, sys time.Duration, err error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("parse stat: no ')' after the command name: %w", ErrProbeMissing)
	}
	// After ") " come fields 3 (state) onwards; utime and stime are fields
	// 14 and 15, so indexes 11 and 12 here.
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("parse stat: %d fields after the command name, want >= 13: %w", len(f), ErrProbeMissing)
	}
	var ticks [2]uint64
	for k, s := range f[11:13] {
		v, err := strconv.ParseUint(s, 10, 63)
		if err != nil {
			return 0, 0, fmt.Errorf("parse stat: cpu ticks %q: %w", s, err)
		}
		ticks[k] = v
	}
	if ticks[0]+ticks[1] > math.MaxInt64/uint64(time.Second/UserHZ) {
		return 0, 0, fmt.Errorf("parse stat: %d cpu ticks out of range", ticks[0]+ticks[1])
	}
	return time.Duration(ticks[0]) * (time.Second / UserHZ), time.Duration(ticks[1]) * (time.Second / UserHZ), nil
}

// SumCounter adds up every sample of metric name in a Prometheus text
// exposition, over all label values (wsgate_frames_total{direction=...}).
// Comment lines and other metrics are skipped.
func SumCounter(text []byte, name string) (float64, error) {
	var sum float64
	found := false
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		rest, ok := bytes.CutPrefix(line, []byte(name))
		if !ok || len(rest) == 0 || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		if rest[0] == '{' {
			j := bytes.IndexByte(rest, '}')
			if j < 0 {
				return 0, fmt.Errorf("parse metrics: %s: unterminated labels", name)
			}
			rest = rest[j+1:]
		}
		f := strings.Fields(string(rest))
		if len(f) < 1 {
			return 0, fmt.Errorf("parse metrics: %s: no value", name)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("parse metrics: %s: %w", name, err)
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("parse metrics: %w", err)
	}
	if !found {
		return 0, fmt.Errorf("parse metrics: %s: %w", name, ErrProbeMissing)
	}
	return sum, nil
}

// RSS reads the resident memory of process pid, in bytes.
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read rss of %d: %w", pid, err)
	}
	return ParseVmRSS(b)
}

// CPU reads the user plus system CPU time process pid has used so far.
func CPU(pid int) (time.Duration, error) {
	user, sys, err := cpuSplit(pid)
	return user + sys, err
}

// cpuSplit reads the user and the system CPU time process pid has used
// so far, apart.
func cpuSplit(pid int) (user, sys time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read cpu of %d: %w", pid, err)
	}
	return ParseCPUSplit(b)
}

// Stat is the part of a /proc/PID/stat line the runner reads.
type Stat struct {
	// Comm is the command name (field 2, without its parentheses).
	Comm string
	// PPID is the parent's process id (field 4).
	PPID int
}

// ParseStat returns the command name and parent PID of a /proc/PID/stat
// line. The command name may hold spaces and parentheses, so it runs from
// the first '(' to the last ')'.
func ParseStat(stat []byte) (Stat, error) {
	i, j := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if i < 0 || j < i {
		return Stat{}, fmt.Errorf("parse stat: no (command name): %w", ErrProbeMissing)
	}
	f := strings.Fields(string(stat[j+1:]))
	if len(f) < 2 {
		return Stat{}, fmt.Errorf("parse stat: %d fields after the command name, want >= 2: %w", len(f), ErrProbeMissing)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil || ppid < 0 {
		return Stat{}, fmt.Errorf("parse stat: parent pid %q: bad number", f[1])
	}
	return Stat{Comm: string(stat[i+1 : j]), PPID: ppid}, nil
}

// ReadStat reads the command name and parent of process pid.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, fmt.Errorf("read stat of %d: %w", pid, err)
	}
	return ParseStat(b)
}

// Children returns the PIDs of the processes whose parent is pid, in
// ascending order, by reading every /proc/N/stat. A process that exits
// during the scan is skipped.
func Children(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("children of %d: %w", pid, err)
	}
	var kids []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		st, err := ReadStat(n)
		if err != nil {
			continue
		}
		if st.PPID == pid {
			kids = append(kids, n)
		}
	}
	slices.Sort(kids)
	return kids, nil
}

// RSSSum is the resident memory of every process in pids together, in
// bytes.
func RSSSum(pids []int) (int64, error) {
	var sum int64
	for _, p := range pids {
		v, err := RSS(p)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// CPUSum is the user plus system CPU time of every process in pids
// together.
func CPUSum(pids []int) (time.Duration, error) {
	user, sys, err := CPUSplitSum(pids)
	return user + sys, err
}

// CPUSplitSum is the user and the system CPU time of every process in
// pids together, apart.
func CPUSplitSum(pids []int) (user, sys time.Duration, err error) {
	for _, p := range pids {
		u, s, err := cpuSplit(p)
		if err != nil {
			return 0, 0, err
		}
		user += u
		sys += s
	}
	return user, sys, nil
}

// ParseSlabTotal sums active objects times object size over every cache
// of a /proc/slabinfo text: the kernel's slab memory in use, in bytes.
func ParseSlabTotal(slabinfo []byte) (int64, error) {
	var total int64
	caches := 0
	for line := range strings.SplitSeq(string(slabinfo), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 4 || fs[0] == "slabinfo" || strings.HasPrefix(fs[0], "#") {
			continue
		}
		active, err1 := strconv.ParseInt(fs[1], 10, 64)
		size, err2 := strconv.ParseInt(fs[3], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("slabinfo: bad line %q", line)
		}
		total += active * size
		caches++
	}
	if caches == 0 {
		return 0, errors.New("slabinfo: no cache")
	}
	return total, nil
}

// SlabTotal reads /proc/slabinfo (root only) and returns ParseSlabTotal
// of it.
func SlabTotal() (int64, error) {
	b, err := os.ReadFile("/proc/slabinfo")
	if err != nil {
		return 0, err
	}
	return ParseSlabTotal(b)
}
