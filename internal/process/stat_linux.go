package process

import "github.com/ukeys/ukeys/internal/procfs"

// TreeSupported: procStat reads /proc.
const TreeSupported = true

// Stat returns a process's parent pid and start time (fields 4 and 22
// of /proc/<pid>/stat), read at once.
func Stat(pid int) (ppid int, start string, ok bool) {
	st, ok := procfs.ReadStat(pid)
	return st.PPID, st.Start, ok
}
