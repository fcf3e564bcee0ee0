package server

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// stat is what the daemon reads of a process from /proc/<pid>/stat.
type stat struct {
	ppid  int    // field 4
	start string // field 22: start time in clock ticks since boot
}

// readStat reads and parses /proc/<pid>/stat; ok is false if the process
// or /proc is not there.
func readStat(pid int) (st stat, ok bool) {
	if pid <= 0 {
		return stat{}, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
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
	_, err2 := strconv.ParseUint(string(f[6]), 10, 64) // the flags: a field a stat line has
	if _, err3 := strconv.ParseUint(string(f[19]), 10, 64); err1 != nil || err2 != nil || err3 != nil || ppid < 0 {
		return stat{}, false
	}
	return stat{ppid: ppid, start: string(f[19])}, true
}

// parseCapEff finds the effective capability set in the text of
// /proc/<pid>/status: the line "CapEff:\t" and 16 hexadecimal digits.
func parseCapEff(b []byte) (uint64, bool) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if v, ok := bytes.CutPrefix(line, []byte("CapEff:")); ok {
			caps, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 16, 64)
			return caps, err == nil
		}
	}
	return 0, false
}

// statusCreds is what session_to_parent checks of a parent process in
// /proc/<pid>/status: its real, effective and saved uids and gids, and
// how many threads it has.
type statusCreds struct {
	uids, gids [3]uint32
	threads    int
	groups     []uint32 // supplementary
}

// parseStatusCreds reads the Uid, Gid and Threads lines of a status file.
func parseStatusCreds(b []byte) (statusCreds, bool) {
	var sc statusCreds
	seen := 0
	for _, line := range bytes.Split(b, []byte("\n")) {
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		switch string(name) {
		case "Uid", "Gid":
			if len(f) < 3 {
				return statusCreds{}, false
			}
			dst := &sc.uids
			if string(name) == "Gid" {
				dst = &sc.gids
			}
			for i := range 3 {
				v, err := strconv.ParseUint(string(f[i]), 10, 32)
				if err != nil {
					return statusCreds{}, false
				}
				dst[i] = uint32(v)
			}
			seen++
		case "Groups":
			for _, g := range f {
				v, err := strconv.ParseUint(string(g), 10, 32)
				if err != nil {
					return statusCreds{}, false
				}
				sc.groups = append(sc.groups, uint32(v))
			}
		case "Threads":
			if len(f) < 1 {
				return statusCreds{}, false
			}
			n, err := strconv.Atoi(string(f[0]))
			if err != nil || n < 1 {
				return statusCreds{}, false
			}
			sc.threads = n
			seen++
		}
	}
	return sc, seen == 3
}

// readStatusCreds reads a process's credentials from /proc.
func readStatusCreds(pid int) (statusCreds, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return statusCreds{}, false
	}
	return parseStatusCreds(b)
}
