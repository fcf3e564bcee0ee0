package procfs

import (
	"bytes"
	"strconv"
)

// Stat is what the daemon reads of a process from /proc/<pid>/stat.
type Stat struct {
	PPID  int    // field 4
	SID   int    // field 6: its POSIX session
	Start string // field 22: start time in clock ticks since boot
}

// ReadStat reads and parses /proc/<pid>/stat; ok is false if the process
// or /proc is not there.
func ReadStat(pid int) (st Stat, ok bool) {
	if pid <= 0 {
		return Stat{}, false
	}
	b, err := ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	return ParseStat(b)
}

// ParseStat parses one /proc/<pid>/stat line. The command name (field 2)
// may hold spaces and parentheses, whatever a process chose to call
// itself: the fields are counted from after the last ')', where field 3
// (the state) begins.
func ParseStat(b []byte) (st Stat, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return Stat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	sid, err2 := strconv.Atoi(string(f[3]))
	_, err3 := strconv.ParseUint(string(f[6]), 10, 64) // the flags: a field a stat line has
	if _, err4 := strconv.ParseUint(string(f[19]), 10, 64); err1 != nil || err2 != nil || err3 != nil || err4 != nil || ppid < 0 {
		return Stat{}, false
	}
	return Stat{PPID: ppid, SID: sid, Start: string(f[19])}, true
}
