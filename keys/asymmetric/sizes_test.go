package asymmetric

import (
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/certtest"
	"github.com/ukeys/ukeys/keys"
)

// Keys too large for the kernel's RSA, each found by an audit to cost the
// daemon CPU growing with the square of a modulus of any size, from one
// add_key or link by a user without privilege (a 1 Mib modulus held a
// core for 46 s): Go's RSA bounds neither the modulus nor the exponent.
// Each is now refused before the arithmetic, as the kernel refuses it.

// hugeRSA returns a random odd number of bits bits: a modulus nobody
// holds the factors of.
func hugeRSA(bits int) *rsa.PublicKey {
	nb := make([]byte, bits/8)
	rand.Read(nb)
	nb[0] |= 0x80
	nb[len(nb)-1] |= 1
	return &rsa.PublicKey{N: new(big.Int).SetBytes(nb), E: 1<<31 - 1}
}

// withRSASignature replaces a certificate's signature by sig, labelled
// sha256WithRSAEncryption (as its own, inner, label must say: the
// certificate is signed with an RSA key to begin with).
func withRSASignature(t *testing.T, der, sig []byte) []byte {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	out, err := asn1.Marshal(struct {
		TBS asn1.RawValue
		Alg pkix.AlgorithmIdentifier
		Sig asn1.BitString
	}{asn1.RawValue{FullBytes: c.RawTBSCertificate},
		pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}, Parameters: asn1.NullRawValue},
		asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func certFor(t *testing.T, tmpl, parent *x509.Certificate, pub any, signer any) []byte {
	t.Helper()
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// A certificate that says it signed itself, for an RSA key of 16,384
// bits and a signature of junk: its self-signature was checked (and
// failed, EKEYREJECTED, after the arithmetic); the kernel refuses the
// key first, with EINVAL.
func TestSelfSignedCertificateOfAnRSAKeyTooLarge(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	pub := hugeRSA(1 << 14)
	signer := certtest.NewKey(t, certtest.Options{Bits: 2048}) // its signature's algorithm is the one replaced
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "huge"}}
	der := withRSASignature(t, certFor(t, tmpl, tmpl, pub, signer), append([]byte{1}, make([]byte, 1<<11-1)...))
	if _, err := c.AddKey("asymmetric", "x", der, keys.SessionKeyring); !errors.Is(err, keys.EINVAL) {
		t.Fatalf("a self-signed certificate of a 16,384-bit RSA key: %v, want EINVAL", err)
	}
}

// A PKCS#8 RSA key of 8,192 bits made of two odd numbers that are not
// primes, consistent otherwise (Go's parser checks how the numbers
// relate, never that they are prime): it was accepted, after arithmetic
// on every number, where the kernel's RSA could use no key of its size.
// It is now refused (EBADMSG) from its modulus alone.
func TestPKCS8KeyOfAnRSAKeyTooLarge(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	p8, n := fakeRSAPKCS8(t, 1<<13)
	if got, ok := pkcs8RSAModulus(p8); !ok || got.Cmp(n) != 0 {
		t.Fatalf("the modulus read ahead: %v", ok)
	}
	if _, err := c.AddKey("asymmetric", "x", p8, keys.SessionKeyring); !errors.Is(err, keys.EBADMSG) {
		t.Fatalf("a PKCS#8 key of an 8,192-bit RSA modulus: %v, want EBADMSG", err)
	}
}

// fakeRSAPKCS8 makes a PKCS#8 RSA key of bits bits from two random odd
// numbers, with the exponents and coefficient that go with them, and
// returns it with its modulus.
func fakeRSAPKCS8(t *testing.T, bits int) ([]byte, *big.Int) {
	t.Helper()
	e, one := big.NewInt(65537), big.NewInt(1)
	odd := func() *big.Int {
		for {
			b := make([]byte, bits/16)
			rand.Read(b)
			b[0] |= 0xc0
			b[len(b)-1] |= 1
			x := new(big.Int).SetBytes(b)
			if new(big.Int).GCD(nil, nil, e, new(big.Int).Sub(x, one)).Cmp(one) == 0 {
				return x
			}
		}
	}
	var p, q, d *big.Int
	for {
		p, q = odd(), odd()
		if new(big.Int).GCD(nil, nil, p, q).Cmp(one) != 0 {
			continue
		}
		pm, qm := new(big.Int).Sub(p, one), new(big.Int).Sub(q, one)
		lcm := new(big.Int).Div(new(big.Int).Mul(pm, qm), new(big.Int).GCD(nil, nil, pm, qm))
		if d = new(big.Int).ModInverse(e, lcm); d != nil {
			break
		}
	}
	n := new(big.Int).Mul(p, q)
	dp := new(big.Int).Mod(d, new(big.Int).Sub(p, one))
	dq := new(big.Int).Mod(d, new(big.Int).Sub(q, one))
	qinv := new(big.Int).ModInverse(q, p)
	pkcs1, err := asn1.Marshal(struct {
		Version               int
		N                     *big.Int
		E                     int
		D, P, Q, Dp, Dq, Qinv *big.Int
	}{0, n, 65537, d, p, q, dp, dq, qinv})
	if err != nil {
		t.Fatal(err)
	}
	p8, err := asn1.Marshal(struct {
		Version int
		Alg     pkix.AlgorithmIdentifier
		Key     []byte
	}{0, pkix.AlgorithmIdentifier{Algorithm: oidRSAEncryption, Parameters: asn1.NullRawValue}, pkcs1})
	if err != nil {
		t.Fatal(err)
	}
	return p8, n
}

// A certificate of a 16,384-bit RSA key that is not self-signed is added,
// as the kernel adds it; a keyring restricted to what it signs then
// refuses a certificate that claims its signature with EINVAL, before the
// arithmetic, as the kernel's RSA refuses the key.
func TestRestrictionBySignerTooLarge(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	ca := certtest.New(t, certtest.Options{CN: "ca", Curve: elliptic.P256(), CA: true}, nil)
	pub := hugeRSA(1 << 14)
	bigTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "huge signer"},
		SubjectKeyId: []byte{1, 2, 3, 4}, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	signerID := must(c.AddKey("asymmetric", "signer", certFor(t, bigTmpl, ca.Cert, pub, ca.Key), keys.SessionKeyring))(t)
	ring := must(c.AddKey("keyring", "restricted", nil, keys.SessionKeyring))(t)
	typ, spec := "asymmetric", "key_or_keyring:"+itoa(signerID)
	noErr(t, c.RestrictKeyring(ring, &typ, &spec))
	// A child claiming the huge key's signature (its issuer and key id),
	// signed in truth by another key, the signature then replaced.
	parent := &x509.Certificate{Subject: bigTmpl.Subject, SubjectKeyId: bigTmpl.SubjectKeyId}
	other := certtest.NewKey(t, certtest.Options{Bits: 2048})
	childKey := certtest.NewKey(t, certtest.Options{Curve: elliptic.P256()})
	child := certFor(t, &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "child"}}, parent, childKey.Public(), other)
	child = withRSASignature(t, child, append([]byte{1}, make([]byte, 1<<11-1)...))
	if _, err := c.AddKey("asymmetric", "child", child, ring); !errors.Is(err, keys.EINVAL) {
		t.Fatalf("a certificate claiming a 16,384-bit RSA signer's signature, into a keyring it restricts: %v, want EINVAL", err)
	}
}
