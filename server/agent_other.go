//go:build !linux

package server

import "errors"

// containerIdentity is what ties a container's id to its processes: on
// Linux, its pid or mount namespace. Elsewhere there are no seccomp
// listeners to serve, and no container is admitted.
type containerIdentity struct{}

func identityOf(*procHandle) (containerIdentity, error) {
	return containerIdentity{}, errors.New("containers are told apart only on Linux")
}

func (containerIdentity) holds(int) bool { return false }

func containerOf(*ContainerProcessState) (procHandle, containerIdentity, error) {
	return procHandle{fd: -1}, containerIdentity{}, errors.New("containers are told apart only on Linux")
}
