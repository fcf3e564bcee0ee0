package keys

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha3"
	"crypto/sha512"
	"encoding/binary"
	"github.com/ukeys/ukeys/keyctl"
	"hash"
	"math/big"
	"strings"
)

// DHParams names the three user keys that hold a Diffie-Hellman
// computation's operands, as struct keyctl_dh_params does. Each payload
// is a big-endian unsigned integer.
type DHParams struct {
	Private Serial // the local private value (the exponent)
	Prime   Serial // the group's prime modulus
	Base    Serial // the generator, or the other side's public value
}

// KDFParams asks [Caller.DHCompute] to pass the shared secret through the
// kernel's key derivation function, as struct keyctl_kdf_params does.
type KDFParams struct {
	// Hash names the digest as the kernel's crypto API does: "sha256",
	// "sha512", "sha3-256"… (see dhHashNames for the list ukeys knows).
	Hash string
	// OtherInfo is SP800-56A's OtherInfo, hashed after the shared
	// secret; at most MaxKDFOtherInfo bytes.
	OtherInfo []byte
}

// Limits of KEYCTL_DH_COMPUTE, the kernel's.
const (
	MaxKDFOutput    = keyctl.MaxKDFOutput // KEYCTL_KDF_MAX_OUTPUT_LEN
	MaxKDFOtherInfo = 64                  // KEYCTL_KDF_MAX_OI_LEN
	maxHashName     = 127                 // CRYPTO_MAX_ALG_NAME, less its NUL
	// The kernel's multi-precision integers refuse inputs of more
	// significant bits than this (MAX_EXTERN_MPI_BITS).
	maxDHOperandBytes = 16384 / 8
	// Its DH refuses primes shorter than this many bits (counted on the
	// payload's length, leading zero bytes included).
	minDHPrimeBits = 1536
	// The kernel sizes the result in whole 64-bit limbs of the prime.
	dhLimb = 8
)

// dhHash is a digest the KDF can use: keyed digests (hmac(…)) exist in
// the kernel too, but have no key here, which the kernel reports with
// ENOKEY when it first hashes.
type dhHash struct {
	size  int
	new   func() hash.Hash
	keyed bool
}

// dhHashNames are the kernel crypto API's names for the digests that Go's
// standard library provides. A name the kernel would know but ukeys does
// not (sm3, streebog, wp512, blake2b…) fails as an unknown one: ENOENT.
var dhHashNames = []string{"md5", "sha1", "sha224", "sha256", "sha384", "sha512", "sha3-224", "sha3-256", "sha3-384", "sha3-512"}

// dhHashNamed returns one of dhHashNames's digests. A switch rather than a
// map: every program that links keys (ukeyctl among them) would build
// the map at start-up.
func dhHashNamed(name string) (dhHash, bool) {
	switch name {
	case "md5":
		return dhHash{md5.Size, md5.New, false}, true
	case "sha1":
		return dhHash{sha1.Size, sha1.New, false}, true
	case "sha224":
		return dhHash{sha256.Size224, sha256.New224, false}, true
	case "sha256":
		return dhHash{sha256.Size, sha256.New, false}, true
	case "sha384":
		return dhHash{sha512.Size384, sha512.New384, false}, true
	case "sha512":
		return dhHash{sha512.Size, sha512.New, false}, true
	case "sha3-224":
		return dhHash{28, func() hash.Hash { return sha3.New224() }, false}, true
	case "sha3-256":
		return dhHash{32, func() hash.Hash { return sha3.New256() }, false}, true
	case "sha3-384":
		return dhHash{48, func() hash.Hash { return sha3.New384() }, false}, true
	case "sha3-512":
		return dhHash{64, func() hash.Hash { return sha3.New512() }, false}, true
	}
	return dhHash{}, false
}

// lookupDHHash resolves a hash name as crypto_alloc_shash would.
func lookupDHHash(name string) (dhHash, error) {
	if len(name) > maxHashName {
		return dhHash{}, EINVAL
	}
	if inner, ok := strings.CutPrefix(name, "hmac("); ok && strings.HasSuffix(inner, ")") {
		h, ok := dhHashNamed(strings.TrimSuffix(inner, ")"))
		if !ok {
			return dhHash{}, ENOENT
		}
		h.keyed = true
		return h, nil
	}
	h, ok := dhHashNamed(name)
	if !ok {
		return dhHash{}, ENOENT
	}
	return h, nil
}

// DHCompute computes base^private mod prime from three user keys the
// caller can read, as KEYCTL_DH_COMPUTE does, and returns its length n
// and, unless only the length was asked for, the bytes.
//
// Without kdf, buflen is the size of the caller's buffer: 0 asks only for
// the length the result needs (n, no bytes); a smaller buffer than that
// fails with [EOVERFLOW]. The result is as long as the prime, rounded up to
// whole 64-bit words as the kernel rounds it, with leading zero bytes.
//
// With kdf, the result is exactly buflen bytes (at most [MaxKDFOutput]) of
// the SP800-56A/SP800-108 counter KDF over the zero-padded shared secret
// followed by kdf.OtherInfo.
//
// Errors are the kernel's, in its order: [EMSGSIZE] for a KDF output or
// OtherInfo over the limits, [EINVAL] for a hash name over 127 bytes,
// [ENOENT] for a hash it does not know; then, for the prime, the base and
// the private key in that order, [ENOKEY] if the key cannot be found, read
// or used (missing, negative, revoked, expired or without [Read]
// permission: the kernel folds every lookup failure into ENOKEY) and
// [EOPNOTSUPP] if it is not a "user" key; EINVAL for a prime that is zero
// or shorter than 1536 bits, a base or private value longer than the
// prime, or an operand of more than 16384 significant bits.
//
// The exponentiation is math/big's, which is not constant-time: the
// time it takes depends on the private value. The kernel's mpi_powm is not
// constant-time either. Copies of the operands and the shared secret are
// zeroed once used; math/big's intermediate values cannot be.
func (c *Caller) DHCompute(p DHParams, buflen uint64, kdf *KDFParams) (int, []byte, error) {
	n, out, err := c.dhCompute(p, buflen, kdf)
	return n, out, wrap("keyctl_dh_compute", 0, err)
}

func (c *Caller) dhCompute(p DHParams, buflen uint64, kdf *KDFParams) (int, []byte, error) {
	var h dhHash
	if kdf != nil {
		if buflen > MaxKDFOutput || len(kdf.OtherInfo) > MaxKDFOtherInfo {
			return 0, nil, EMSGSIZE
		}
		var err error
		if h, err = lookupDHHash(kdf.Hash); err != nil {
			return 0, nil, err
		}
	}
	prime, err := c.dhOperand(p.Prime)
	if err != nil {
		return 0, nil, err
	}
	defer clear(prime)
	base, err := c.dhOperand(p.Base)
	if err != nil {
		return 0, nil, err
	}
	defer clear(base)
	priv, err := c.dhOperand(p.Private)
	if err != nil {
		return 0, nil, err
	}
	defer clear(priv)

	// crypto_dh_decode_key and dh_set_params, in their order.
	if len(priv) > len(prime) || len(base) > len(prime) || allZero(prime) {
		return 0, nil, EINVAL
	}
	if len(prime)*8 < minDHPrimeBits {
		return 0, nil, EINVAL
	}
	if significant(prime) > maxDHOperandBytes || significant(base) > maxDHOperandBytes ||
		significant(priv) > maxDHOperandBytes {
		return 0, nil, EINVAL
	}
	outlen := (significant(prime) + dhLimb - 1) / dhLimb * dhLimb
	if kdf == nil {
		if buflen == 0 {
			return outlen, nil, nil
		}
		if uint64(outlen) > buflen {
			return 0, nil, EOVERFLOW
		}
	}

	secret := dhPower(base, priv, prime, outlen)
	if kdf == nil {
		return outlen, secret, nil
	}
	defer clear(secret)
	if h.keyed && buflen > 0 {
		return 0, nil, ENOKEY // an hmac with no key set refuses to hash
	}
	out := kdfCounter(h, buflen, secret, kdf.OtherInfo)
	return len(out), out, nil
}

// dhOperand reads one operand as the kernel's dh_data_from_key does.
func (c *Caller) dhOperand(id Serial) ([]byte, error) {
	r, err := c.lookupUserKey(id, 0, Read)
	if err != nil {
		return nil, ENOKEY
	}
	defer r.put()
	k := r.key
	if k.typ.Load() != userType {
		return nil, EOPNOTSUPP
	}
	// Checked again, as the kernel does under the key's semaphore: the key
	// may have been revoked since the lookup.
	if err := k.validate(c.s.now()); err != nil {
		return nil, err
	}
	sec := c.s.dom.Read()
	pl := k.loadPayload()
	if pl == nil {
		sec.End()
		return nil, EKEYREVOKED
	}
	out := append([]byte(nil), pl.Data...) // copied before the section ends
	sec.End()
	return out, nil
}

// dhPower returns base^exp mod m as a big-endian number of exactly n
// bytes (n is at least the modulus's length).
func dhPower(base, exp, mod []byte, n int) []byte {
	b := new(big.Int).SetBytes(base)
	e := new(big.Int).SetBytes(exp)
	m := new(big.Int).SetBytes(mod)
	r := new(big.Int).Exp(b, e, m)
	out := r.FillBytes(make([]byte, n))
	for _, x := range []*big.Int{b, e, r} {
		clear(x.Bits()) // the words math/big lets us reach
	}
	return out
}

// kdfCounter is the kernel's crypto_kdf108_ctr_generate with an unkeyed
// digest: blocks H(counter || z || otherInfo) for counter = 1, 2, … (32-bit
// big-endian), concatenated and cut to n bytes.
func kdfCounter(h dhHash, n uint64, z, otherInfo []byte) []byte {
	out := make([]byte, 0, int(n)+h.size)
	var ctr [4]byte
	for i := uint32(1); uint64(len(out)) < n; i++ {
		d := h.new()
		binary.BigEndian.PutUint32(ctr[:], i)
		d.Write(ctr[:])
		d.Write(z)
		d.Write(otherInfo)
		out = d.Sum(out)
	}
	clear(out[n:cap(out)])
	return out[:n]
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// significant returns b's length without its leading zero bytes.
func significant(b []byte) int {
	i := 0
	for i < len(b) && b[i] == 0 {
		i++
	}
	return len(b) - i
}
