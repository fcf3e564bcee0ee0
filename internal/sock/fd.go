package sock

import "syscall"

// FD returns the descriptor under a socket (or any [syscall.Conn]),
// which stays the socket's: for a hand-over, which sends copies of it
// (SCM_RIGHTS) and must neither close nor keep it.
func FD(x syscall.Conn) (int, error) {
	raw, err := x.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return -1, err
	}
	return fd, nil
}
