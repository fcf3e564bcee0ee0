package client

import (
	"math"

	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// DHCompute returns base^private mod prime, computed by the daemon from
// three user keys, zero-padded to the prime's length as the kernel pads it
// (keyctl_dh_compute_alloc). See keys.Caller.DHCompute for the errors.
func (c *Client) DHCompute(private, prime, base keyctl.Serial) ([]byte, error) {
	// A buffer as large as any result: one round trip instead of asking
	// for the length first.
	return bytesOf(c.call(wire.OpDHCompute, wire.Int(private), wire.Int(prime), wire.Int(base), wire.Int(int64(math.MaxInt64)), wire.OptStr(nil), wire.Bytes(nil)))
}

// DHComputeKDF derives outlen bytes (at most [keyctl.MaxKDFOutput]) from the
// Diffie-Hellman shared secret and otherInfo with the kernel's counter KDF
// over the named hash, "sha256" for example (keyctl_dh_compute_kdf).
func (c *Client) DHComputeKDF(private, prime, base keyctl.Serial, hash string, otherInfo []byte, outlen uint64) ([]byte, error) {
	if otherInfo == nil {
		otherInfo = []byte{}
	}
	return bytesOf(c.call(wire.OpDHCompute, wire.Int(private), wire.Int(prime), wire.Int(base), wire.Uint64(outlen), wire.Str(hash), wire.Bytes(otherInfo)))
}
