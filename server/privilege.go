package server

import (
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
)

// asPrivileged reports whether cred is at least as privileged as the
// daemon itself ([process.AsPrivileged]): what taking the daemon's keys
// over asks.
func asPrivileged(cred keys.Cred) bool {
	return process.AsPrivileged(cred.UID, cred.Caps, cred.CapsKnown)
}

// daemonsEqual reports whether c is the daemon's equal, as a hand-over
// asks of the process that takes the keys: as privileged as the daemon
// and in its user namespace. A rootless daemon's uid in a user
// namespace of its own (a rootless container's root) is not: the
// containers' ids in the status are not for it.
func (c *caller) daemonsEqual() bool {
	if !asPrivileged(c.kc.Cred()) || c.proc == nil {
		return false
	}
	same, _ := c.proc.handle.InOwnUserNS()
	return same
}
