package process

import "golang.org/x/sys/unix"

// AwaitExit waits until the child process pid has exited, without
// reaping it (WNOWAIT): until it is reaped, its pid cannot be given to
// another process. The context's kill (exec.Cmd's Cancel) still applies
// meanwhile.
func AwaitExit(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}
