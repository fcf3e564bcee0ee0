package server

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procTreeSupported: procStat reads /proc.
const procTreeSupported = true

// procStat returns a process's parent pid and start time (fields 4 and 22
// of /proc/<pid>/stat), read at once.
func procStat(pid int) (ppid int, start string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", false
	}
	// The command name may hold spaces and parentheses: count fields from
	// after the last ')', where field 3 (state) begins.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, "", false
	}
	return ppid, f[19], true
}
