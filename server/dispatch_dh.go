package server

import (
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// dhCompute serves OpDHCompute: the serials of the private key, the
// prime and the base, the caller's buffer size (as an unsigned number),
// the hash (absent: no KDF) and otherinfo. It answers the length and the
// result, so that a buflen of 0 asks for the length only, as with the
// kernel.
func (c *caller) dhCompute(a wire.Args) *wire.Response {
	p := keys.DHParams{Private: a.Serial(0), Prime: a.Serial(1), Base: a.Serial(2)}
	var kdf *keys.KDFParams
	if h := a.OptStr(4); h != nil {
		kdf = &keys.KDFParams{Hash: *h, OtherInfo: a.Bytes(5)}
	}
	// A modular exponentiation with a 16,384-bit prime costs seconds of
	// CPU: the caller's uid runs one at a time, and the daemon leaves a
	// processor to everyone else, so that the time is the caller's.
	var n int
	var out []byte
	var err error
	if werr := c.s.expensive(c.account(), func() { n, out, err = c.kc.DHCompute(p, uint64(a.Int(3)), kdf) }); werr != nil {
		return fail(werr)
	}
	if err != nil {
		return fail(err)
	}
	return okBuf(out, int64(n))
}
