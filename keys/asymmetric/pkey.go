package asymmetric

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"encoding/asn1"
	"math/big"
	"strings"

	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/keys"
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
func (a *asymKey) scheme(p keys.PkeyParams, op keys.PkeyOp) (pkeyScheme, error) {
	switch {
	case a.algo == "rsa":
		if !kernelUsable(a.pub) {
			return pkeyScheme{}, keys.EINVAL
		}
		switch p.Enc {
		case "pkcs1":
			if op != keys.PkeyOpSign && op != keys.PkeyOpVerify {
				return pkeyScheme{}, nil // pkcs1pad: a hash is allowed and unused
			}
			if p.Hash == "" || p.Hash == "none" {
				return pkeyScheme{sig: true}, nil
			}
			h, ok := pkeyHashes[p.Hash]
			if !ok {
				return pkeyScheme{}, keys.EINVAL // no pkcs1(rsa,HASH) template
			}
			return pkeyScheme{sig: true, hash: &h}, nil
		case "raw":
			if p.Hash != "" {
				return pkeyScheme{}, keys.EINVAL // raw RSA cannot tell hashes apart
			}
			return pkeyScheme{}, nil
		}
		return pkeyScheme{}, keys.EINVAL
	case strings.HasPrefix(a.algo, "ecdsa"):
		if p.Enc != "x962" && p.Enc != "p1363" {
			return pkeyScheme{}, keys.EINVAL
		}
		if !ecdsaHashes[p.Hash] {
			return pkeyScheme{}, keys.EINVAL
		}
		h := pkeyHashes[p.Hash]
		return pkeyScheme{sig: true, hash: &h}, nil
	}
	return pkeyScheme{}, keys.ENOPKG
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
func (a *asymKey) query(p keys.PkeyParams) (keys.PkeyQuery, error) {
	sc, err := a.scheme(p, keys.PkeyOpSign)
	if err != nil {
		return keys.PkeyQuery{}, err
	}
	private := a.priv != nil
	var q keys.PkeyQuery
	switch k := a.pub.(type) {
	case *rsa.PublicKey:
		n := uint16(k.Size())
		// The raw cipher and the pkcs1 scheme report the same sizes (the
		// generic signature code bounds the data by the key's size too).
		q = keys.PkeyQuery{KeySize: uint32(n) * 8, MaxDataSize: n, MaxSigSize: n, MaxEncSize: n, MaxDecSize: n,
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
		q = keys.PkeyQuery{KeySize: uint32(bits), MaxDataSize: ecdsaMaxDigest, SupportedOps: keyctl.PkeySupportsVerify}
		if p.Enc == "p1363" {
			q.MaxSigSize = uint16(2 * n)
		} else {
			q.MaxSigSize = uint16(x962MaxSize(n))
		}
		if private {
			q.SupportedOps |= keyctl.PkeySupportsSign
		}
		return q, nil
	}
	return keys.PkeyQuery{}, keys.ENOPKG
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

// openPkey is the type's Pkey hook: the parsed key of a payload, held
// against wiping (Wipe waits for Release) for as long as an operation
// uses it. It is called in a read section, where the payload cannot be
// wiped yet.
func openPkey(p *keys.Payload) (keys.PkeyKey, error) {
	a, _ := p.Extra.(*asymKey)
	if a == nil {
		return nil, keys.EKEYREVOKED
	}
	a.mu.RLock()
	if a.wiped {
		a.mu.RUnlock()
		return nil, keys.EKEYREVOKED
	}
	return pkeyKey{a}, nil
}

// pkeyKey is an asymKey open for the pkey operations (keys.PkeyKey).
type pkeyKey struct{ a *asymKey }

func (k pkeyKey) Query(p keys.PkeyParams) (keys.PkeyQuery, error) { return k.a.query(p) }

func (k pkeyKey) Release() { k.a.mu.RUnlock() }

// EDS is keyctl_pkey_e_d_s past the sizes keys checked: the scheme, then
// the operation.
func (k pkeyKey) EDS(op keys.PkeyOp, p keys.PkeyParams, in []byte, outLen int) ([]byte, error) {
	sc, err := k.a.scheme(p, op)
	if err != nil {
		return nil, err
	}
	return k.a.eds(sc, p.Enc, op, in, outLen)
}

// Verify is keyctl_pkey_verify past the sizes keys checked.
func (k pkeyKey) Verify(p keys.PkeyParams, data, sig []byte) error {
	sc, err := k.a.scheme(p, keys.PkeyOpVerify)
	if err != nil {
		return err
	}
	if !sc.sig {
		return keys.ENOENT // raw RSA is no signature scheme
	}
	return k.a.verify(sc, p.Enc, data, sig)
}

// eds performs encrypt, decrypt or sign.
func (a *asymKey) eds(sc pkeyScheme, enc string, op keys.PkeyOp, in []byte, outLen int) ([]byte, error) {
	if sc.sig != (op == keys.PkeyOpSign) {
		return nil, keys.EINVAL // a cipher does not sign, a signature scheme does not encrypt
	}
	switch op {
	case keys.PkeyOpEncrypt:
		k := a.pub.(*rsa.PublicKey)
		// The kernel (6.18) writes the whole block even into a shorter
		// buffer; ukeys refuses one, as the padding layer means to.
		if outLen < k.Size() {
			return nil, keys.EOVERFLOW
		}
		if enc == "pkcs1" {
			out, err := rsa.EncryptPKCS1v15(rand.Reader, k, in)
			if err != nil {
				return nil, keys.EOVERFLOW // longer than the key's size less 11
			}
			return out, nil
		}
		m := new(big.Int).SetBytes(in)
		if !rsaInRange(m, k.N) {
			return nil, keys.EINVAL
		}
		return m.Exp(m, big.NewInt(int64(k.E)), k.N).FillBytes(make([]byte, k.Size())), nil
	case keys.PkeyOpDecrypt:
		k, ok := a.priv.(*rsa.PrivateKey)
		if !ok {
			return nil, keys.EINVAL // no private exponent
		}
		if enc == "pkcs1" && len(in) != k.Size() || !rsaInRange(new(big.Int).SetBytes(in), k.N) {
			return nil, keys.EINVAL
		}
		if enc == "pkcs1" {
			out, err := rsa.DecryptPKCS1v15(nil, k, in)
			if err != nil {
				return nil, keys.EINVAL
			}
			if len(out) > outLen {
				clear(out)
				return nil, keys.EOVERFLOW
			}
			return out, nil
		}
		if outLen < k.Size() {
			return nil, keys.EOVERFLOW
		}
		return rawRSADecrypt(k, in)
	}
	// Sign.
	switch k := a.priv.(type) {
	case *rsa.PrivateKey:
		if sc.hash != nil && len(in) != sc.hash.size {
			return nil, keys.EINVAL
		}
		prefix := sc.prefix()
		if len(prefix)+len(in) > k.Size()-11 || outLen < k.Size() {
			return nil, keys.EOVERFLOW
		}
		// With no hash named, SignPKCS1v15 pads the bytes as given: the
		// DigestInfo prefix and the digest.
		t := append(append(make([]byte, 0, len(prefix)+len(in)), prefix...), in...)
		out, err := rsa.SignPKCS1v15(nil, k, 0, t)
		if err != nil {
			return nil, keys.EOVERFLOW
		}
		return out, nil
	case *ecdsa.PrivateKey:
		r, s, err := ecdsa.Sign(rand.Reader, k, in)
		if err != nil {
			return nil, keys.EINVAL
		}
		n := (k.Curve.Params().BitSize + 7) / 8
		var out []byte
		if enc == "p1363" {
			out = make([]byte, 2*n)
			r.FillBytes(out[:n])
			s.FillBytes(out[n:])
		} else if out, err = asn1.Marshal(struct{ R, S *big.Int }{r, s}); err != nil {
			return nil, keys.EINVAL
		}
		if len(out) > outLen {
			return nil, keys.EOVERFLOW
		}
		return out, nil
	}
	return nil, keys.EINVAL // no private key
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
			return keys.EINVAL
		}
		s := new(big.Int).SetBytes(sig)
		if !rsaInRange(s, k.N) {
			return keys.EINVAL
		}
		em := s.Exp(s, big.NewInt(int64(k.E)), k.N).FillBytes(make([]byte, n))
		// EMSA-PKCS1-v1_5: 00 01 FF…FF 00 T, at least eight FF (scheme
		// refused keys too small to hold that).
		if em[0] != 0 {
			return keys.EINVAL
		}
		if em[1] != 1 {
			return keys.EBADMSG
		}
		i := 2
		for i < n && em[i] == 0xff {
			i++
		}
		if i-2 < 8 || i >= n || em[i] != 0 {
			return keys.EBADMSG
		}
		t := em[i+1:]
		prefix := sc.prefix()
		if len(t) < len(prefix) || string(t[:len(prefix)]) != string(prefix) {
			return keys.EBADMSG
		}
		if string(t[len(prefix):]) != string(data) {
			return keys.EKEYREJECTED
		}
		return nil
	case *ecdsa.PublicKey:
		n := (k.Curve.Params().BitSize + 7) / 8
		var r, s *big.Int
		if enc == "p1363" {
			if len(sig) != 2*n {
				return keys.EINVAL
			}
			r, s = new(big.Int).SetBytes(sig[:n]), new(big.Int).SetBytes(sig[n:])
		} else {
			var v struct{ R, S *big.Int }
			rest, err := asn1.Unmarshal(sig, &v)
			if err != nil || len(rest) != 0 {
				return keys.EBADMSG
			}
			if len(v.R.Bytes()) > n || len(v.S.Bytes()) > n {
				return keys.EINVAL
			}
			r, s = v.R, v.S
		}
		order := k.Curve.Params().N
		if r.Sign() <= 0 || s.Sign() <= 0 || r.Cmp(order) >= 0 || s.Cmp(order) >= 0 {
			return keys.EBADMSG
		}
		if !ecdsa.Verify(k, data, r, s) {
			return keys.EKEYREJECTED
		}
		return nil
	}
	return keys.ENOPKG
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
		return nil, keys.ENOMEM
	}
	e := big.NewInt(int64(k.E))
	rInv := new(big.Int).ModInverse(r, k.N)
	if rInv == nil {
		return nil, keys.EINVAL
	}
	blinded := new(big.Int).Exp(r, e, k.N)
	blinded.Mul(blinded, c).Mod(blinded, k.N)
	m := blinded.Exp(blinded, k.D, k.N)
	m.Mul(m, rInv).Mod(m, k.N)
	out := m.FillBytes(make([]byte, k.Size()))
	clear(m.Bits())
	return out, nil
}
