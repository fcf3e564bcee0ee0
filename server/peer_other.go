//go:build !linux && !darwin && !freebsd

package server

import (
	"errors"

	"github.com/ukeys/ukeys/keys"
)

// peerCredFD is not implemented on this system: without the peer's
// credentials from the kernel the daemon cannot tell who is calling, so it
// refuses every connection rather than guess.
func peerCredFD(int) (keys.Cred, error) {
	return keys.Cred{}, errors.New("peer credentials are not supported on this system")
}
