package server

import (
	"bytes"
	"strconv"

	"github.com/ukeys/ukeys/internal/procfs"
)

// stat is what the daemon reads of a process from /proc/<pid>/stat.
type stat struct {
	ppid  int    // field 4
	sid   int    // field 6: its POSIX session
	start string // field 22: start time in clock ticks since boot
}

// readStat reads and parses /proc/<pid>/stat; ok is false if the process
// or /proc is not there.
func readStat(pid int) (st stat, ok bool) {
	if pid <= 0 {
		return stat{}, false
	}
	b, err := procfs.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	return parseStat(b)
}

// parseStat parses one /proc/<pid>/stat line. The command name (field 2)
// may hold spaces and parentheses, whatever a process chose to call
// itself: the fields are counted from after the last ')', where field 3
// (the state) begins.
func parseStat(b []byte) (st stat, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return stat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	sid, err2 := strconv.Atoi(string(f[3]))
	_, err3 := strconv.ParseUint(string(f[6]), 10, 64) // the flags: a field a stat line has
	if _, err4 := strconv.ParseUint(string(f[19]), 10, 64); err1 != nil || err2 != nil || err3 != nil || err4 != nil || ppid < 0 {
		return stat{}, false
	}
	return stat{ppid: ppid, sid: sid, start: string(f[19])}, true
}
