package server

import (
	"os"

	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/internal/procfs"
	"github.com/ukeys/ukeys/keys"
)

// asPrivileged reports whether cred is at least as privileged as the
// daemon itself: the daemon's effective uid and, where the daemon holds
// capabilities, every one of them (read as accept reads a client's: in
// the daemon's user namespace, for the uid it connected with). It is
// what taking the daemon's keys over, or handing it a container, asks:
// uid 0 alone is not enough, for a root process stripped of its
// capabilities (a container's root, a service with an empty bounding
// set) may read no other process's memory, and so no key the daemon
// holds. Where /proc is not the daemon's own, capabilities cannot be
// read and the uid decides, as everywhere else then.
func asPrivileged(cred keys.Cred) bool {
	if cred.UID != uint32(os.Geteuid()) {
		return false
	}
	own, ok := process.OwnCapabilities()
	if !ok || own == 0 {
		return true
	}
	if !cred.CapsKnown {
		return !procfs.Ours()
	}
	return cred.Caps&own == own
}
