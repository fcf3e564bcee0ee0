//go:build !linux && !darwin && !freebsd

package peer

import (
	"errors"
)

// OfFD is not implemented on this system: without the peer's
// credentials from the kernel the daemon cannot tell who is calling, so it
// refuses every connection rather than guess.
func OfFD(int) (Cred, error) {
	return Cred{}, errors.New("peer credentials are not supported on this system")
}
