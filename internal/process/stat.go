package process

// StartTime returns the process's start time ([Stat]), or "" if the
// process is not there or cannot be read.
func StartTime(pid int) string {
	_, start, _ := Stat(pid)
	return start
}
