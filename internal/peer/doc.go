// Package peer asks the kernel who is at the other end of a Unix socket:
// SO_PEERCRED and SO_PEERGROUPS on Linux (peer_linux.go), LOCAL_PEERCRED
// and the peer's pid on macOS and FreeBSD (peer_bsd.go, peer_darwin.go,
// peer_freebsd.go); elsewhere it refuses (peer_other.go), since a daemon
// that cannot tell who calls must not guess.
//
// What it reports is the kernel's record from connect time, never
// anything the client says, and immune to the client changing its
// credentials or exiting afterwards.
package peer
