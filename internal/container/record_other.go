//go:build !linux

package container

import (
	"errors"

	"github.com/ukeys/ukeys/internal/process"
)

// Record is an [Identity] as a hand-over carries it: on Linux, its
// namespaces. Elsewhere there is none.
type Record struct{}

// Record returns the empty record.
func (Identity) Record() Record { return Record{} }

// Rebind refuses: containers are told apart only on Linux.
func Rebind(Record, *process.Handle) (Identity, error) {
	return Identity{}, errors.New("containers are told apart only on Linux")
}
