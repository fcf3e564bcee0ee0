package server

import (
	"net"

	"github.com/ukeys/ukeys/keys"
)

// peerCred learns who is at the other end of a Unix socket from the
// kernel, never from anything the client says: its uid, gid and groups
// as they were when it connected, and its pid where the kernel tells it
// (0 otherwise: a process of its own per connection, see accept). How
// depends on the system: peerCredFD in peer_linux.go (SO_PEERCRED,
// SO_PEERGROUPS), peer_bsd.go (LOCAL_PEERCRED, LOCAL_PEERPID).
func peerCred(c *net.UnixConn) (keys.Cred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return keys.Cred{}, err
	}
	var cred keys.Cred
	var serr error
	if err := raw.Control(func(fd uintptr) { cred, serr = peerCredFD(int(fd)) }); err != nil {
		return keys.Cred{}, err
	}
	return cred, serr
}
