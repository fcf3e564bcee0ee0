package process

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// TreeSupported: procStat asks sysctl.
const TreeSupported = true

// Stat returns a process's parent pid and start time, read at once
// from the kernel's kinfo_proc (sysctl kern.proc.pid.<pid>), as Linux's
// reads them from /proc/<pid>/stat. The start time, to the microsecond,
// tells a process from a later one given its pid.
func Stat(pid int) (ppid int, start string, ok bool) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil || int(kp.Proc.P_pid) != pid { // no such process: EIO, a short answer
		return 0, "", false
	}
	st := kp.Proc.P_starttime
	return int(kp.Eproc.Ppid), fmt.Sprintf("%d.%06d", st.Sec, st.Usec), true
}
