package server

// procTreeSupported: procStat reads /proc.
const procTreeSupported = true

// procStat returns a process's parent pid and start time (fields 4 and 22
// of /proc/<pid>/stat), read at once.
func procStat(pid int) (ppid int, start string, ok bool) {
	st, ok := readStat(pid)
	return st.ppid, st.start, ok
}
