//go:build darwin || freebsd

package peer

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// OfFD reads the credentials of the peer of the socket fd from
// the kernel: LOCAL_PEERCRED, which the kernel records when the client
// connects (as Linux's SO_PEERCRED), so a client that changes its
// credentials or exits afterwards changes nothing; and the pid where the
// kernel reports it (peerPID).
func OfFD(fd int) (Cred, error) {
	xc, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return Cred{}, fmt.Errorf("LOCAL_PEERCRED: %w", err)
	}
	pid, err := peerPID(fd, xc)
	if err != nil {
		return Cred{}, err
	}
	return xucredCred(xc.Version, xc.Uid, int(xc.Ngroups), xc.Groups[:], pid)
}
