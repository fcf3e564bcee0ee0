package process

import "os"

// AsPrivileged reports whether a process of effective uid uid and
// capabilities caps (capsKnown: whether they could be read, as
// [Handle.Capabilities] reads them) is at least as privileged as the
// daemon itself: the daemon's effective uid and, where the daemon holds
// capabilities, every one of them. It is what taking the daemon's keys
// over, or handing its seccomp agent a container, asks: uid 0 alone is
// not enough, for a root process stripped of its capabilities (a
// container's root, a service with an empty bounding set) may read no
// other process's memory, and so no key the daemon holds. Where /proc is
// not the daemon's own ([OwnView]), capabilities cannot be read and the
// uid decides, as everywhere else then.
func AsPrivileged(uid uint32, caps uint64, capsKnown bool) bool {
	if uid != uint32(os.Geteuid()) {
		return false
	}
	own, ok := OwnCapabilities()
	if !ok || own == 0 {
		return true
	}
	if !capsKnown {
		return !OwnView()
	}
	return caps&own == own
}
