package asymmetric

import (
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/certtest"
	"github.com/ukeys/ukeys/keys"
)

// A payload chosen to hurt the daemon, found by an audit (package keys'
// hostile_payload_test.go holds the others).

// An X.509 certificate may carry an RSA modulus of any size: one of a
// byte made a signature check read past its one-byte result. The kernel
// adds such a key, but its RSA takes only 512 to 4096 bits, and every
// operation fails with EINVAL; so here.
func TestPkeyRefusesRSAKeysTheKernelCannotUse(t *testing.T) {
	e := newEnv(t)
	attacker := e.caller(2000, 2000)
	ca := certtest.New(t, certtest.Options{CN: "attacker CA", Curve: elliptic.P256()}, nil)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7),
		Subject:      pkix.Name{CommonName: "tiny"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &rsa.PublicKey{N: big.NewInt(4), E: 65537}, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	id := must(attacker.AddKey("asymmetric", "tiny", der, keys.SessionKeyring))(t)
	if _, err := attacker.PkeyQuery(id, "enc=pkcs1"); !errors.Is(err, keys.EINVAL) {
		t.Errorf("query of a one-byte RSA key: %v, want EINVAL", err)
	}
	if err := attacker.PkeyVerify(id, "enc=pkcs1", nil, []byte{2}); !errors.Is(err, keys.EINVAL) {
		t.Errorf("verify with a one-byte RSA key: %v, want EINVAL", err)
	}
	if _, err := attacker.PkeyEncrypt(id, "enc=pkcs1", []byte{1}, 64); !errors.Is(err, keys.EINVAL) {
		t.Errorf("encrypt with a one-byte RSA key: %v, want EINVAL", err)
	}
	for bits, ok := range map[int]bool{511: true, 512: true, 513: false, 1024: true, 2047: true, 4096: true, 4097: false, 8192: false} {
		n := new(big.Int).SetBit(new(big.Int), bits-1, 1)
		if got := rsaKernelSize(&rsa.PublicKey{N: n, E: 65537}); got != ok {
			t.Errorf("a modulus of %d bits: usable %v, want %v (the kernel counts 64-bit limbs)", bits, got, ok)
		}
	}
}
