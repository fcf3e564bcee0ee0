//go:build !linux

package container

import (
	"errors"
	"syscall"

	"github.com/ukeys/ukeys/internal/process"
)

// Pod is what the containers of one pod share: on Linux, their IPC and
// network namespaces. Elsewhere no container is admitted.
type Pod struct{}

// PodOf: pods are told apart only on Linux.
func PodOf(*process.Handle) (Pod, error) {
	return Pod{}, errors.New("pods are told apart only on Linux")
}

// Shared: no pod shares anything here.
func (Pod) Shared() bool { return false }

// Same: no pod is another's here.
func (Pod) Same(Pod) bool { return false }

// Close: nothing is held.
func (*Pod) Close() {}

// HoldsAny: no process is a container's here.
func HoldsAny([]Identity, int) bool { return false }

// IndexHolding: no process is a container's here.
func IndexHolding([]Identity, int) int { return -1 }

// PodRecord is a [Pod] as a hand-over carries it: on Linux, its
// namespaces. Elsewhere there is none.
type PodRecord struct{}

// Record returns the empty record, and no descriptor.
func (Pod) Record() (PodRecord, int) { return PodRecord{}, -1 }

// RebindPod refuses (and closes fd): pods are told apart only on Linux.
func RebindPod(_ PodRecord, fd int) (Pod, error) {
	if fd >= 0 {
		syscall.Close(fd)
	}
	return Pod{}, errors.New("pods are told apart only on Linux")
}
