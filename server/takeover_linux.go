package server

import "golang.org/x/sys/unix"

// handoverSocket makes the hand-over connection's socket, close-on-exec
// from the start.
func handoverSocket() (int, error) {
	return unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
}

// handoverRecvFlags makes the descriptors received close-on-exec as they
// arrive.
const handoverRecvFlags = unix.MSG_CMSG_CLOEXEC

// dumpableWhileAsking makes this process dumpable, so that the old daemon
// may read its user namespace (userns_linux.go), and returns what makes
// it as it was: not dumpable, unless it was dumpable before.
func dumpableWhileAsking() (restore func()) {
	was, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil || was == 1 {
		return func() {}
	}
	unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
	return func() { unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
}
