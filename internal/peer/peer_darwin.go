package peer

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// peerPID is the pid of the process that connected to fd, as the kernel
// recorded it at connect time (LOCAL_PEERPID, macOS 10.8 and later).
func peerPID(fd int, _ *unix.Xucred) (int, error) {
	pid, err := unix.GetsockoptInt(fd, unix.SOL_LOCAL, unix.LOCAL_PEERPID)
	if err != nil {
		return 0, fmt.Errorf("LOCAL_PEERPID: %w", err)
	}
	return pid, nil
}
