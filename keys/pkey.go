package keys

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"encoding/asn1"
	"encoding/binary"
	"math/big"
	"strings"

	"github.com/ukeys/ukeys/keyctl"
)

// The public-key operations (KEYCTL_PKEY_QUERY, _ENCRYPT, _DECRYPT, _SIGN
// and _VERIFY) on asymmetric keys, with the kernel's parameter strings
// and its rules for which encoding serves which operation:
//
//   - RSA with "enc=raw" (the default): the bare RSA function, which
//     encrypts and decrypts whole key-sized blocks, and signs nothing;
//     a hash is refused.
//   - RSA with "enc=pkcs1": PKCS#1 v1.5 padding for encryption, and
//     PKCS#1 v1.5 signatures of a digest made with "hash=" (the
//     DigestInfo prefix of that hash; none without one).
//   - ECDSA with "enc=x962" (an ASN.1 signature) or "enc=p1363" (r and
//     s side by side), a "hash=" of the SHA-1, SHA-2 or SHA-3 families
//     required; ECDSA neither encrypts nor decrypts.
//
// A certificate holds a public key: encrypt and verify. A PKCS#8 key
// holds the pair: all four. ukeys also signs with ECDSA PKCS#8 keys,
// which the kernel's PKCS#8 parser (RSA only, and absent from Debian's
// kernels) and its ECDSA code (verify only) do not.

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

// pkeyOp is one of the operations, as the kernel's kernel_pkey_operation.
type pkeyOp int

const (
	pkeyEncrypt pkeyOp = iota
	pkeyDecrypt
	pkeySign
	pkeyVerify
)

// pkeyParams is a parsed parameter string.
type pkeyParams struct {
	enc  string // "raw" unless given
	hash string // "" unless given
}

// parsePkeyParams reads "enc=X hash=Y" as the kernel's
// keyctl_pkey_params_parse: tokens split at spaces and tabs (empty ones
// skipped), each "enc=" or "hash=" once with a value; anything else is
// EINVAL.
func parsePkeyParams(info string) (pkeyParams, error) {
	p := pkeyParams{enc: "raw"}
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
			p.enc = v
		case strings.HasPrefix(tok, "hash="):
			if seenHash {
				return p, EINVAL
			}
			seenHash, v = true, tok[5:]
			p.hash = v
		default:
			return p, EINVAL
		}
		if v == "" {
			return p, EINVAL
		}
	}
	return p, nil
}

// pkeyHash is a hash a signature may name: its digest's length, its
// object identifier, and the DigestInfo prefix a PKCS#1 v1.5 signature
// puts before its digest (made from the two at start).
type pkeyHash struct {
	size   int
	oid    asn1.ObjectIdentifier
	prefix []byte
}

// pkeyHashes are the hashes the kernel's signature schemes know by name:
// pkcs1(rsa,HASH) templates exist for all of them, ECDSA takes the SHA-1,
// SHA-2 and SHA-3 ones.
var pkeyHashes = map[string]pkeyHash{
	"md5":      {16, asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 5}, nil},
	"sha1":     {20, asn1.ObjectIdentifier{1, 3, 14, 3, 2, 26}, nil},
	"rmd160":   {20, asn1.ObjectIdentifier{1, 3, 36, 3, 2, 1}, nil},
	"sha224":   {28, asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 4}, nil},
	"sha256":   {32, asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}, nil},
	"sha384":   {48, asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 2}, nil},
	"sha512":   {64, asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 3}, nil},
	"sha3-256": {32, asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 8}, nil},
	"sha3-384": {48, asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 9}, nil},
	"sha3-512": {64, asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 10}, nil},
}

func init() {
	for name, h := range pkeyHashes {
		h.prefix = digestInfoPrefix(h)
		pkeyHashes[name] = h
	}
}

// ecdsaHashes are the hashes ECDSA accepts.
var ecdsaHashes = map[string]bool{"sha1": true, "sha224": true, "sha256": true, "sha384": true,
	"sha512": true, "sha3-256": true, "sha3-384": true, "sha3-512": true}

// digestInfoPrefix is what precedes a digest of h in a PKCS#1 v1.5
// signature: DigestInfo's DER up to the digest's octets.
func digestInfoPrefix(h pkeyHash) []byte {
	type algID struct {
		OID  asn1.ObjectIdentifier
		Null asn1.RawValue
	}
	der, err := asn1.Marshal(struct {
		Alg    algID
		Digest []byte
	}{algID{h.oid, asn1.NullRawValue}, make([]byte, h.size)})
	if err != nil {
		panic(err) // fixed inputs
	}
	return der[:len(der)-h.size]
}

// pkeyScheme is what an encoding and hash make of a key for an
// operation: a signature scheme (sig) or a cipher.
type pkeyScheme struct {
	sig  bool
	hash *pkeyHash // nil: none
}

// prefix is what a PKCS#1 v1.5 signature puts before the digest: the
// hash's DigestInfo prefix, nothing without a hash.
func (sc pkeyScheme) prefix() []byte {
	if sc.hash == nil {
		return nil
	}
	return sc.hash.prefix
}

// scheme is the kernel's software_key_determine_akcipher: which scheme
// serves op on a with params, or why none does.
func (a *asymKey) scheme(p pkeyParams, op pkeyOp) (pkeyScheme, error) {
	switch {
	case a.algo == "rsa":
		if !kernelUsable(a.pub) {
			return pkeyScheme{}, EINVAL
		}
		switch p.enc {
		case "pkcs1":
			if op != pkeySign && op != pkeyVerify {
				return pkeyScheme{}, nil // pkcs1pad: a hash is allowed and unused
			}
			if p.hash == "" || p.hash == "none" {
				return pkeyScheme{sig: true}, nil
			}
			h, ok := pkeyHashes[p.hash]
			if !ok {
				return pkeyScheme{}, EINVAL // no pkcs1(rsa,HASH) template
			}
			return pkeyScheme{sig: true, hash: &h}, nil
		case "raw":
			if p.hash != "" {
				return pkeyScheme{}, EINVAL // raw RSA cannot tell hashes apart
			}
			return pkeyScheme{}, nil
		}
		return pkeyScheme{}, EINVAL
	case strings.HasPrefix(a.algo, "ecdsa"):
		if p.enc != "x962" && p.enc != "p1363" {
			return pkeyScheme{}, EINVAL
		}
		if !ecdsaHashes[p.hash] {
			return pkeyScheme{}, EINVAL
		}
		h := pkeyHashes[p.hash]
		return pkeyScheme{sig: true, hash: &h}, nil
	}
	return pkeyScheme{}, ENOPKG
}

// rsaKernelSize reports whether the kernel's RSA takes a key of k's
// size: its modulus counted in whole 64-bit limbs, 512 to 4096 bits in
// the steps rsa_check_key_length lists. An X.509 certificate may carry a
// modulus of any size (Go's parser bounds none); the kernel adds such a
// key, but every operation on it fails with EINVAL, and so here, where a
// modulus of a byte once left a signature check reading past its result.
func rsaKernelSize(k *rsa.PublicKey) bool {
	switch (k.N.BitLen() + 63) / 64 * 64 {
	case 512, 1024, 1536, 2048, 3072, 4096:
		return true
	}
	return false
}

// query is software_key_query for params: the sizes and operations of
// the scheme a sign would use.
func (a *asymKey) query(p pkeyParams) (PkeyQuery, error) {
	sc, err := a.scheme(p, pkeySign)
	if err != nil {
		return PkeyQuery{}, err
	}
	private := a.priv != nil
	var q PkeyQuery
	switch k := a.pub.(type) {
	case *rsa.PublicKey:
		n := uint16(k.Size())
		// The raw cipher and the pkcs1 scheme report the same sizes (the
		// generic signature code bounds the data by the key's size too).
		q = PkeyQuery{KeySize: uint32(n) * 8, MaxDataSize: n, MaxSigSize: n, MaxEncSize: n, MaxDecSize: n,
			SupportedOps: keyctl.PkeySupportsEncrypt}
		if private {
			q.SupportedOps |= keyctl.PkeySupportsDecrypt
		}
		if sc.sig {
			q.SupportedOps |= keyctl.PkeySupportsVerify
			if private {
				q.SupportedOps |= keyctl.PkeySupportsSign
			}
		}
		return q, nil
	case *ecdsa.PublicKey:
		bits := k.Curve.Params().BitSize
		n := (bits + 7) / 8
		q = PkeyQuery{KeySize: uint32(bits), MaxDataSize: ecdsaMaxDigest, SupportedOps: keyctl.PkeySupportsVerify}
		if p.enc == "p1363" {
			q.MaxSigSize = uint16(2 * n)
		} else {
			q.MaxSigSize = uint16(x962MaxSize(n))
		}
		if private {
			q.SupportedOps |= keyctl.PkeySupportsSign
		}
		return q, nil
	}
	return PkeyQuery{}, ENOPKG
}

// ecdsaMaxDigest is the longest digest the kernel's ECDSA takes: a
// SHA-512 one (a longer input is cut to the curve's order anyway).
const ecdsaMaxDigest = 64

// x962MaxSize is the longest ASN.1 ECDSA signature for a curve of n-byte
// numbers: a SEQUENCE of two INTEGERs, each with a leading zero.
func x962MaxSize(n int) int {
	body := 2 * (2 + n + 1)
	if body >= 128 {
		return 3 + body
	}
	return 2 + body
}

// PkeyQuery reports what the asymmetric key id can do with the
// parameter string info (KEYCTL_PKEY_QUERY). The caller needs Search
// permission; keys of other types fail with EOPNOTSUPP.
func (c *Caller) PkeyQuery(id Serial, info string) (PkeyQuery, error) {
	var q PkeyQuery
	err := c.withPkey(id, info, func(a *asymKey, p pkeyParams) error {
		var err error
		q, err = a.query(p)
		return err
	})
	return q, wrap("keyctl_pkey_query", id, err)
}

// withPkey parses info, looks the key up with Search permission, and
// runs fn on its parsed form, which stays usable (not wiped) meanwhile.
func (c *Caller) withPkey(id Serial, info string, fn func(a *asymKey, p pkeyParams) error) error {
	p, err := parsePkeyParams(info)
	if err != nil {
		return err
	}
	r, err := c.lookupUserKey(id, 0, Search)
	if err != nil {
		return err
	}
	defer r.put()
	if r.key.typ.Load() != asymmetricType {
		return EOPNOTSUPP
	}
	sec := c.s.dom.Read()
	pl := r.key.loadPayload()
	var a *asymKey
	if pl != nil {
		a, _ = pl.Extra.(*asymKey)
	}
	if a == nil {
		sec.End()
		return EKEYREVOKED
	}
	a.mu.RLock()
	sec.End()
	defer a.mu.RUnlock()
	if a.wiped {
		return EKEYREVOKED
	}
	return fn(a, p)
}

// PkeyEncrypt encrypts in with the asymmetric key id, answering at most
// outLen bytes (KEYCTL_PKEY_ENCRYPT). See PkeyQuery for info.
func (c *Caller) PkeyEncrypt(id Serial, info string, in []byte, outLen int) ([]byte, error) {
	out, err := c.pkeyEDS(id, info, pkeyEncrypt, in, outLen)
	return out, wrap("keyctl_pkey_encrypt", id, err)
}

// PkeyDecrypt decrypts in with the private key id (KEYCTL_PKEY_DECRYPT).
func (c *Caller) PkeyDecrypt(id Serial, info string, in []byte, outLen int) ([]byte, error) {
	out, err := c.pkeyEDS(id, info, pkeyDecrypt, in, outLen)
	return out, wrap("keyctl_pkey_decrypt", id, err)
}

// PkeySign signs the digest in with the private key id
// (KEYCTL_PKEY_SIGN).
func (c *Caller) PkeySign(id Serial, info string, in []byte, outLen int) ([]byte, error) {
	out, err := c.pkeyEDS(id, info, pkeySign, in, outLen)
	return out, wrap("keyctl_pkey_sign", id, err)
}

// PkeyVerify checks that sig is the key id's signature of the digest
// data (KEYCTL_PKEY_VERIFY): nil if it is, EKEYREJECTED if it is not.
func (c *Caller) PkeyVerify(id Serial, info string, data, sig []byte) error {
	err := c.withPkey(id, info, func(a *asymKey, p pkeyParams) error {
		q, err := a.query(p)
		if err != nil {
			return err
		}
		if len(data) > int(q.MaxDataSize) || len(sig) > int(q.MaxSigSize) {
			return EINVAL
		}
		sc, err := a.scheme(p, pkeyVerify)
		if err != nil {
			return err
		}
		if !sc.sig {
			return ENOENT // raw RSA is no signature scheme
		}
		return a.verify(sc, p.enc, data, sig)
	})
	return wrap("keyctl_pkey_verify", id, err)
}

// pkeyEDS is keyctl_pkey_e_d_s: the sizes checked against the query's,
// then the operation.
func (c *Caller) pkeyEDS(id Serial, info string, op pkeyOp, in []byte, outLen int) ([]byte, error) {
	var out []byte
	err := c.withPkey(id, info, func(a *asymKey, p pkeyParams) error {
		q, err := a.query(p)
		if err != nil {
			return err
		}
		inMax, outMax := q.MaxDecSize, q.MaxEncSize
		switch op {
		case pkeyDecrypt:
			inMax, outMax = q.MaxEncSize, q.MaxDecSize
		case pkeySign:
			inMax, outMax = q.MaxDataSize, q.MaxSigSize
		}
		if outLen < 0 || len(in) > int(inMax) || outLen > int(outMax) {
			return EINVAL
		}
		sc, err := a.scheme(p, op)
		if err != nil {
			return err
		}
		out, err = a.eds(sc, p.enc, op, in, outLen)
		return err
	})
	return out, err
}

// eds performs encrypt, decrypt or sign.
func (a *asymKey) eds(sc pkeyScheme, enc string, op pkeyOp, in []byte, outLen int) ([]byte, error) {
	if sc.sig != (op == pkeySign) {
		return nil, EINVAL // a cipher does not sign, a signature scheme does not encrypt
	}
	switch op {
	case pkeyEncrypt:
		k := a.pub.(*rsa.PublicKey)
		// The kernel (6.18) writes the whole block even into a shorter
		// buffer; ukeys refuses one, as the padding layer means to.
		if outLen < k.Size() {
			return nil, EOVERFLOW
		}
		if enc == "pkcs1" {
			out, err := rsa.EncryptPKCS1v15(rand.Reader, k, in)
			if err != nil {
				return nil, EOVERFLOW // longer than the key's size less 11
			}
			return out, nil
		}
		m := new(big.Int).SetBytes(in)
		if !rsaInRange(m, k.N) {
			return nil, EINVAL
		}
		return m.Exp(m, big.NewInt(int64(k.E)), k.N).FillBytes(make([]byte, k.Size())), nil
	case pkeyDecrypt:
		k, ok := a.priv.(*rsa.PrivateKey)
		if !ok {
			return nil, EINVAL // no private exponent
		}
		if enc == "pkcs1" && len(in) != k.Size() || !rsaInRange(new(big.Int).SetBytes(in), k.N) {
			return nil, EINVAL
		}
		if enc == "pkcs1" {
			out, err := rsa.DecryptPKCS1v15(nil, k, in)
			if err != nil {
				return nil, EINVAL
			}
			if len(out) > outLen {
				clear(out)
				return nil, EOVERFLOW
			}
			return out, nil
		}
		if outLen < k.Size() {
			return nil, EOVERFLOW
		}
		return rawRSADecrypt(k, in)
	}
	// Sign.
	switch k := a.priv.(type) {
	case *rsa.PrivateKey:
		if sc.hash != nil && len(in) != sc.hash.size {
			return nil, EINVAL
		}
		prefix := sc.prefix()
		if len(prefix)+len(in) > k.Size()-11 || outLen < k.Size() {
			return nil, EOVERFLOW
		}
		// With no hash named, SignPKCS1v15 pads the bytes as given: the
		// DigestInfo prefix and the digest.
		t := append(append(make([]byte, 0, len(prefix)+len(in)), prefix...), in...)
		out, err := rsa.SignPKCS1v15(nil, k, 0, t)
		if err != nil {
			return nil, EOVERFLOW
		}
		return out, nil
	case *ecdsa.PrivateKey:
		r, s, err := ecdsa.Sign(rand.Reader, k, in)
		if err != nil {
			return nil, EINVAL
		}
		n := (k.Curve.Params().BitSize + 7) / 8
		var out []byte
		if enc == "p1363" {
			out = make([]byte, 2*n)
			r.FillBytes(out[:n])
			s.FillBytes(out[n:])
		} else if out, err = asn1.Marshal(struct{ R, S *big.Int }{r, s}); err != nil {
			return nil, EINVAL
		}
		if len(out) > outLen {
			return nil, EOVERFLOW
		}
		return out, nil
	}
	return nil, EINVAL // no private key
}

// rsaInRange is the kernel's rsa_check_payload: 1 < m < n-1.
func rsaInRange(m, n *big.Int) bool {
	nm1 := new(big.Int).Sub(n, big.NewInt(1))
	return m.Cmp(big.NewInt(1)) > 0 && m.Cmp(nm1) < 0
}

// verify checks sig over the digest data, with the kernel's errors:
// EINVAL for a signature or digest of the wrong size or out of range,
// EBADMSG for a malformed signature, EKEYREJECTED for one of something
// else.
func (a *asymKey) verify(sc pkeyScheme, enc string, data, sig []byte) error {
	switch k := a.pub.(type) {
	case *rsa.PublicKey:
		n := k.Size()
		if len(sig) != n || sc.hash != nil && len(data) != sc.hash.size {
			return EINVAL
		}
		s := new(big.Int).SetBytes(sig)
		if !rsaInRange(s, k.N) {
			return EINVAL
		}
		em := s.Exp(s, big.NewInt(int64(k.E)), k.N).FillBytes(make([]byte, n))
		// EMSA-PKCS1-v1_5: 00 01 FF…FF 00 T, at least eight FF (scheme
		// refused keys too small to hold that).
		if em[0] != 0 {
			return EINVAL
		}
		if em[1] != 1 {
			return EBADMSG
		}
		i := 2
		for i < n && em[i] == 0xff {
			i++
		}
		if i-2 < 8 || i >= n || em[i] != 0 {
			return EBADMSG
		}
		t := em[i+1:]
		prefix := sc.prefix()
		if len(t) < len(prefix) || string(t[:len(prefix)]) != string(prefix) {
			return EBADMSG
		}
		if string(t[len(prefix):]) != string(data) {
			return EKEYREJECTED
		}
		return nil
	case *ecdsa.PublicKey:
		n := (k.Curve.Params().BitSize + 7) / 8
		var r, s *big.Int
		if enc == "p1363" {
			if len(sig) != 2*n {
				return EINVAL
			}
			r, s = new(big.Int).SetBytes(sig[:n]), new(big.Int).SetBytes(sig[n:])
		} else {
			var v struct{ R, S *big.Int }
			rest, err := asn1.Unmarshal(sig, &v)
			if err != nil || len(rest) != 0 {
				return EBADMSG
			}
			if len(v.R.Bytes()) > n || len(v.S.Bytes()) > n {
				return EINVAL
			}
			r, s = v.R, v.S
		}
		order := k.Curve.Params().N
		if r.Sign() <= 0 || s.Sign() <= 0 || r.Cmp(order) >= 0 || s.Cmp(order) >= 0 {
			return EBADMSG
		}
		if !ecdsa.Verify(k, data, r, s) {
			return EKEYREJECTED
		}
		return nil
	}
	return ENOPKG
}

// rawRSADecrypt is c^d mod n, padded to the key's size: crypto/rsa has
// no unpadded private operation, so this one is math/big's, blinded (c
// is multiplied by r^e for a random r first, and the result divided by
// r) so that its timing says nothing about the c an attacker chose.
func rawRSADecrypt(k *rsa.PrivateKey, in []byte) ([]byte, error) {
	c := new(big.Int).SetBytes(in)
	// Blinding: r^e·c, raised to d, divided by r, so that the time taken
	// does not follow the private exponent's use on a chosen c.
	r, err := rand.Int(rand.Reader, k.N)
	if err != nil {
		return nil, ENOMEM
	}
	e := big.NewInt(int64(k.E))
	rInv := new(big.Int).ModInverse(r, k.N)
	if rInv == nil {
		return nil, EINVAL
	}
	blinded := new(big.Int).Exp(r, e, k.N)
	blinded.Mul(blinded, c).Mod(blinded, k.N)
	m := blinded.Exp(blinded, k.D, k.N)
	m.Mul(m, rInv).Mod(m, k.N)
	out := m.FillBytes(make([]byte, k.Size()))
	clear(m.Bits())
	return out, nil
}
