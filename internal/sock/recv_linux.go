package sock

import "golang.org/x/sys/unix"

// RecvFlags makes received descriptors close-on-exec as they arrive.
const RecvFlags = unix.MSG_CMSG_CLOEXEC

// Socket makes a Unix stream socket, close-on-exec from the start.
func Socket() (int, error) {
	return unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
}
