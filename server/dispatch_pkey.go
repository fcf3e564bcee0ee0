package server

import (
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// pkeyQuery serves OpPkeyQuery: the key, a reserved argument that must
// be 0 (EINVAL otherwise, as keyctl(2) says), and the parameter string.
// It answers 0 and the kernel's struct keyctl_pkey_query.
func (c *caller) pkeyQuery(a wire.Args) *wire.Response {
	if a.Int(1) != 0 {
		return fail(keys.EINVAL)
	}
	q, err := c.kc.PkeyQuery(a.Serial(0), a.Str(2))
	if err != nil {
		return fail(err)
	}
	return okBuf(q.Bytes(), 0)
}

// pkeyEDS serves encrypt, decrypt and sign: the key, the parameter
// string, the input and the output's size. A private-key operation with
// a 4,096-bit key costs milliseconds of CPU, so, as dh_compute, it runs
// under the caller's uid's share of the daemon (expensive).
func (c *caller) pkeyEDS(a wire.Args) *wire.Response {
	id, info, in, outLen := a.Serial(0), a.Str(1), a.Bytes(2), a.Int(3)
	op := c.kc.PkeyEncrypt
	switch a.Op() {
	case wire.OpPkeyDecrypt:
		op = c.kc.PkeyDecrypt
	case wire.OpPkeySign:
		op = c.kc.PkeySign
	}
	if outLen < 0 || outLen > 1<<16 {
		return fail(keys.EINVAL) // the kernel's sizes are 16-bit
	}
	var out []byte
	var err error
	if werr := c.s.expensive(c.account(), func() { out, err = op(id, info, in, int(outLen)) }); werr != nil {
		return fail(werr)
	}
	if err != nil {
		return fail(err)
	}
	return okBuf(out, int64(len(out)))
}

// pkeyVerify serves OpPkeyVerify: the key, the parameter string, the
// digest and the signature.
func (c *caller) pkeyVerify(a wire.Args) *wire.Response {
	var err error
	if werr := c.s.expensive(c.account(), func() { err = c.kc.PkeyVerify(a.Serial(0), a.Str(1), a.Bytes(2), a.Bytes(3)) }); werr != nil {
		return fail(werr)
	}
	if err != nil {
		return fail(err)
	}
	return ok()
}
