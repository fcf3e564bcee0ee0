package server

import (
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// dhCompute serves OpDHCompute: ints private, prime, base, buflen (the
// caller's buffer size, as an unsigned number); bufs hash (absent: no KDF)
// and otherinfo. It answers the length in ints and the result in bufs, so
// that a buflen of 0 asks for the length only, as with the kernel.
func (c *conn) dhCompute(r *wire.Request) *wire.Response {
	p := keys.DHParams{
		Private: keys.Serial(r.Int(0)),
		Prime:   keys.Serial(r.Int(1)),
		Base:    keys.Serial(r.Int(2)),
	}
	cutStrings(r, 0) // the hash's name is a C string
	var kdf *keys.KDFParams
	if h := r.Buf(0); h != nil {
		kdf = &keys.KDFParams{Hash: string(h), OtherInfo: r.Buf(1)}
	}
	// A modular exponentiation with a 16,384-bit prime costs seconds of
	// CPU: the caller's uid runs one at a time, and the daemon leaves a
	// processor to everyone else, so that the time is the caller's.
	var n int
	var out []byte
	var err error
	if werr := c.s.expensive(c.cred.UID, func() { n, out, err = c.caller.DHCompute(p, uint64(r.Int(3)), kdf) }); werr != nil {
		return fail(werr)
	}
	if err != nil {
		return fail(err)
	}
	return okBuf(out, int64(n))
}
