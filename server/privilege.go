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
