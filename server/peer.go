package server

import (
	"net"

	"github.com/ukeys/ukeys/internal/peer"
	"github.com/ukeys/ukeys/keys"
)

// peerCred is who is at the other end of a Unix socket, as the kernel
// recorded it when the client connected ([peer.Of]), as the caller's
// credentials; its pid is 0 where the kernel does not tell it, and the
// connection is then a process of its own (see accept).
func peerCred(c *net.UnixConn) (keys.Cred, error) {
	pc, err := peer.Of(c)
	return peerKeysCred(pc), err
}

// peerCredFD is peerCred for a socket descriptor ([peer.OfFD]).
func peerCredFD(fd int) (keys.Cred, error) {
	pc, err := peer.OfFD(fd)
	return peerKeysCred(pc), err
}

func peerKeysCred(pc peer.Cred) keys.Cred {
	return keys.Cred{UID: pc.UID, GID: pc.GID, Groups: pc.Groups, PID: pc.PID}
}
