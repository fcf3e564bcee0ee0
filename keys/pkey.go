package keys

import (
	"encoding/binary"
	"strings"

	"github.com/ukeys/ukeys/keyctl"
)

// The public-key operations (KEYCTL_PKEY_QUERY, _ENCRYPT, _DECRYPT, _SIGN
// and _VERIFY), as the kernel's security/keys/keyctl_pkey.c: the
// parameter string is parsed, the key looked up with Search permission,
// the sizes checked against what the key's type answers for a query,
// and the operation left to the type ([Type.Pkey]; package
// keys/asymmetric's for the "asymmetric" type). A key of a type without
// the operations answers EOPNOTSUPP.

// PkeyQuery is what KEYCTL_PKEY_QUERY reports of a key for a parameter
// string (struct keyctl_pkey_query).
type PkeyQuery struct {
	SupportedOps uint32 // keyctl.PkeySupports* bits
	KeySize      uint32 // in bits
	MaxDataSize  uint16 // the longest input to sign or verify
	MaxSigSize   uint16
	MaxEncSize   uint16 // the longest output of encrypt, input of decrypt
	MaxDecSize   uint16 // the longest input of encrypt, output of decrypt
}

// Bytes is the query as the kernel's struct keyctl_pkey_query lays it out
// (56 bytes, native byte order, the spare words zero).
func (q PkeyQuery) Bytes() []byte {
	b := make([]byte, 56)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], q.SupportedOps)
	ne.PutUint32(b[4:], q.KeySize)
	ne.PutUint16(b[8:], q.MaxDataSize)
	ne.PutUint16(b[10:], q.MaxSigSize)
	ne.PutUint16(b[12:], q.MaxEncSize)
	ne.PutUint16(b[14:], q.MaxDecSize)
	return b
}

// PkeyOp is one of the public-key operations, as the kernel's
// kernel_pkey_operation: what a [PkeyKey] is asked to do.
type PkeyOp int

// The operations, in the kernel's order.
const (
	PkeyOpEncrypt PkeyOp = iota
	PkeyOpDecrypt
	PkeyOpSign
	PkeyOpVerify
)

// PkeyParams is a parsed parameter string of the public-key operations
// (the kernel's kernel_pkey_params): parsed here, the same for every key
// type, so that a type judges only the values.
type PkeyParams struct {
	Enc  string // "raw" unless given
	Hash string // "" unless given
}

// PkeyKey is a key opened for the public-key operations by its type's
// [Type.Pkey] hook: the kernel's asym_query, asym_eds_op and
// asym_verify_signature. The operations check the sizes they are given
// against Query's answer before they call EDS or Verify, and call
// Release once done.
type PkeyKey interface {
	// Query reports what the key can do with params.
	Query(params PkeyParams) (PkeyQuery, error)
	// EDS encrypts, decrypts or signs in (op is never PkeyOpVerify),
	// answering at most outLen bytes.
	EDS(op PkeyOp, params PkeyParams, in []byte, outLen int) ([]byte, error)
	// Verify checks that sig is the key's signature of the digest data:
	// nil if it is, EKEYREJECTED if it is not.
	Verify(params PkeyParams, data, sig []byte) error
	// Release ends the use: the payload the key was opened from may be
	// wiped from then on.
	Release()
}

// parsePkeyParams reads "enc=X hash=Y" as the kernel's
// keyctl_pkey_params_parse: tokens split at spaces and tabs (empty ones
// skipped), each "enc=" or "hash=" once with a value; anything else is
// EINVAL.
func parsePkeyParams(info string) (PkeyParams, error) {
	p := PkeyParams{Enc: "raw"}
	if i := strings.IndexByte(info, 0); i >= 0 {
		info = info[:i]
	}
	if len(info) > keyctl.MaxPkeyInfo {
		return p, EINVAL
	}
	seenEnc, seenHash := false, false
	for _, tok := range strings.FieldsFunc(info, func(r rune) bool { return r == ' ' || r == '\t' }) {
		var v string
		switch {
		case strings.HasPrefix(tok, "enc="):
			if seenEnc {
				return p, EINVAL
			}
			seenEnc, v = true, tok[4:]
			p.Enc = v
		case strings.HasPrefix(tok, "hash="):
			if seenHash {
				return p, EINVAL
			}
			seenHash, v = true, tok[5:]
			p.Hash = v
		default:
			return p, EINVAL
		}
		if v == "" {
			return p, EINVAL
		}
	}
	return p, nil
}

// PkeyQuery reports what the key id can do with the parameter string
// info (KEYCTL_PKEY_QUERY). The caller needs [Search] permission; keys of
// types without the operations fail with [EOPNOTSUPP].
func (c *Caller) PkeyQuery(id Serial, info string) (PkeyQuery, error) {
	var q PkeyQuery
	err := c.withPkey(id, info, func(k PkeyKey, p PkeyParams) error {
		var err error
		q, err = k.Query(p)
		return err
	})
	return q, wrap("keyctl_pkey_query", id, err)
}

// withPkey parses info, looks the key up with Search permission, and
// runs fn on the key as its type opens it, which stays usable (not
// wiped) meanwhile. The type opens it inside a read section, where the
// payload is still whole; fn runs after the section, since a public-key
// operation would hold every grace period as long as it takes.
func (c *Caller) withPkey(id Serial, info string, fn func(k PkeyKey, p PkeyParams) error) error {
	p, err := parsePkeyParams(info)
	if err != nil {
		return err
	}
	r, err := c.lookupUserKey(id, 0, Search)
	if err != nil {
		return err
	}
	defer r.put()
	t := r.key.typ.Load()
	if t.Pkey == nil {
		return EOPNOTSUPP
	}
	sec := c.s.dom.Read()
	pl := r.key.loadPayload()
	if pl == nil {
		sec.End()
		return EKEYREVOKED
	}
	k, err := t.Pkey(pl)
	sec.End()
	if err != nil {
		return err
	}
	defer k.Release()
	return fn(k, p)
}

// PkeyEncrypt encrypts in with the key id, answering at most outLen
// bytes (KEYCTL_PKEY_ENCRYPT). See [Caller.PkeyQuery] for info.
func (c *Caller) PkeyEncrypt(id Serial, info string, in []byte, outLen int) ([]byte, error) {
	out, err := c.pkeyEDS(id, info, PkeyOpEncrypt, in, outLen)
	return out, wrap("keyctl_pkey_encrypt", id, err)
}

// PkeyDecrypt decrypts in with the private key id (KEYCTL_PKEY_DECRYPT).
func (c *Caller) PkeyDecrypt(id Serial, info string, in []byte, outLen int) ([]byte, error) {
	out, err := c.pkeyEDS(id, info, PkeyOpDecrypt, in, outLen)
	return out, wrap("keyctl_pkey_decrypt", id, err)
}

// PkeySign signs the digest in with the private key id
// (KEYCTL_PKEY_SIGN).
func (c *Caller) PkeySign(id Serial, info string, in []byte, outLen int) ([]byte, error) {
	out, err := c.pkeyEDS(id, info, PkeyOpSign, in, outLen)
	return out, wrap("keyctl_pkey_sign", id, err)
}

// PkeyVerify checks that sig is the key id's signature of the digest
// data (KEYCTL_PKEY_VERIFY): nil if it is, [EKEYREJECTED] if it is not.
func (c *Caller) PkeyVerify(id Serial, info string, data, sig []byte) error {
	err := c.withPkey(id, info, func(k PkeyKey, p PkeyParams) error {
		q, err := k.Query(p)
		if err != nil {
			return err
		}
		if len(data) > int(q.MaxDataSize) || len(sig) > int(q.MaxSigSize) {
			return EINVAL
		}
		return k.Verify(p, data, sig)
	})
	return wrap("keyctl_pkey_verify", id, err)
}

// pkeyEDS is keyctl_pkey_e_d_s: the sizes checked against the query's,
// then the operation.
func (c *Caller) pkeyEDS(id Serial, info string, op PkeyOp, in []byte, outLen int) ([]byte, error) {
	var out []byte
	err := c.withPkey(id, info, func(k PkeyKey, p PkeyParams) error {
		q, err := k.Query(p)
		if err != nil {
			return err
		}
		inMax, outMax := q.MaxDecSize, q.MaxEncSize
		switch op {
		case PkeyOpDecrypt:
			inMax, outMax = q.MaxEncSize, q.MaxDecSize
		case PkeyOpSign:
			inMax, outMax = q.MaxDataSize, q.MaxSigSize
		}
		if outLen < 0 || len(in) > int(inMax) || outLen > int(outMax) {
			return EINVAL
		}
		out, err = k.EDS(op, p, in, outLen)
		return err
	})
	return out, err
}
