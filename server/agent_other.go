//go:build !linux

package server

import (
	"errors"

	"github.com/ukeys/ukeys/internal/process"
)

// containerIdentity is what ties a container's id to its processes: on
// Linux, its pid or mount namespace. Elsewhere there are no seccomp
// listeners to serve, and no container is admitted.
type containerIdentity struct{}

func identityOf(*process.Handle) (containerIdentity, bool, error) {
	return containerIdentity{}, false, errors.New("containers are told apart only on Linux")
}

func (containerIdentity) holds(int) bool { return false }

func containerOf(*ContainerProcessState) (process.Handle, containerIdentity, bool, error) {
	return process.Handle{}, containerIdentity{}, false, errors.New("containers are told apart only on Linux")
}

// runtimeCapabilities: no capabilities to read here (see capabilities).
func runtimeCapabilities(h *process.Handle, euid uint32) (caps uint64, known, reaped bool) {
	caps, known = h.Capabilities(euid)
	return caps, known, false
}
