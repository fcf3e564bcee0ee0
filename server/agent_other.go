//go:build !linux

package server

import (
	"errors"
	"net"
)

// containerIdentity is what ties a container's id to its processes: on
// Linux, its pid or mount namespace. Elsewhere there are no seccomp
// listeners to serve, and no container is admitted.
type containerIdentity struct{}

func identityOf(*procHandle) (containerIdentity, bool, error) {
	return containerIdentity{}, false, errors.New("containers are told apart only on Linux")
}

func (containerIdentity) holds(int) bool { return false }

func containerOf(*ContainerProcessState) (procHandle, containerIdentity, bool, error) {
	return procHandle{fd: -1}, containerIdentity{}, false, errors.New("containers are told apart only on Linux")
}

// runtimeCapabilities: no capabilities to read here (see capabilities).
func runtimeCapabilities(h *procHandle, euid uint32) (caps uint64, known, reaped bool) {
	caps, known = h.capabilities(euid)
	return caps, known, false
}

// peerReaped: no pidfds here (see openProc).
func peerReaped(*net.UnixConn) bool { return false }
