//go:build darwin || freebsd

package process

import "golang.org/x/sys/unix"

// AwaitExit waits until the child process pid has exited, without
// reaping it: until it is reaped, its pid cannot be given to another
// process. These kernels' waitid is not in x/sys/unix; kqueue's
// EVFILT_PROC with NOTE_EXIT waits for the exit and leaves the zombie to
// exec.Cmd's Wait. ESRCH means the child is a zombie already. Should the
// kqueue fail otherwise, the wait ends at once, and so does the helper's
// grant: the helper loses its token, no other process gains it.
func AwaitExit(pid int) {
	kq, err := unix.Kqueue()
	if err != nil {
		return
	}
	defer unix.Close(kq)
	var ev unix.Kevent_t
	unix.SetKevent(&ev, pid, unix.EVFILT_PROC, unix.EV_ADD)
	ev.Fflags = unix.NOTE_EXIT
	if _, err := keventRetry(kq, []unix.Kevent_t{ev}, nil, nil); err != nil {
		return
	}
	var evs [1]unix.Kevent_t
	for {
		n, err := keventRetry(kq, nil, evs[:], nil) // no timeout: until the exit
		if err != nil || n > 0 && evs[0].Fflags&unix.NOTE_EXIT != 0 {
			return
		}
	}
}
