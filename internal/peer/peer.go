package peer

import "net"

// Cred is what the kernel recorded of a socket's peer when it connected:
// its effective uid and gid, its supplementary groups, and its pid where
// the kernel tells it (0 otherwise).
type Cred struct {
	UID, GID uint32
	Groups   []uint32
	PID      int
}

// Of learns who is at the other end of a Unix socket from the kernel,
// never from anything the client says: its uid, gid and groups as they
// were when it connected, and its pid where the kernel tells it (0
// otherwise: the daemon then takes each connection for a process of its
// own). How depends on the system: [OfFD].
func Of(c *net.UnixConn) (Cred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Cred{}, err
	}
	var cred Cred
	var serr error
	if err := raw.Control(func(fd uintptr) { cred, serr = OfFD(int(fd)) }); err != nil {
		return Cred{}, err
	}
	return cred, serr
}
