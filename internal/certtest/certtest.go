package certtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"time"
)

// TB is what the makers need of a test: testing.TB has it, and so may a
// program that stops on the first error.
type TB interface {
	Helper()
	Fatal(args ...any)
}

// Cert is a certificate with its key pair.
type Cert struct {
	DER   []byte // the certificate
	PKCS8 []byte // its private key
	Key   crypto.Signer
	Cert  *x509.Certificate
}

// Options shape a certificate.
type Options struct {
	CN, O  string
	Serial int64  // 0: 1
	SKID   []byte // nil: Go's default (a hash of the key) for a CA, none otherwise
	Curve  elliptic.Curve
	Bits   int // RSA key size (default 2048) when Curve is nil
	CA     bool
}

// NewKey makes a key pair as o says.
func NewKey(t TB, o Options) crypto.Signer {
	t.Helper()
	var k crypto.Signer
	var err error
	if o.Curve != nil {
		k, err = ecdsa.GenerateKey(o.Curve, rand.Reader)
	} else {
		bits := o.Bits
		if bits == 0 {
			bits = 2048
		}
		k, err = rsa.GenerateKey(rand.Reader, bits)
	}
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// New makes a certificate for a fresh key, signed by parent (nil: by
// itself).
func New(t TB, o Options, parent *Cert) *Cert {
	t.Helper()
	return NewFor(t, o, NewKey(t, o), parent)
}

// NewFor makes a certificate for key, signed by parent (nil: by itself).
func NewFor(t TB, o Options, key crypto.Signer, parent *Cert) *Cert {
	t.Helper()
	serial := o.Serial
	if serial == 0 {
		serial = 1
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: o.CN},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		BasicConstraintsValid: true,
		IsCA:                  o.CA,
		SubjectKeyId:          o.SKID,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	if o.O != "" {
		tmpl.Subject.Organization = []string{o.O}
	}
	signer, signerCert := key, tmpl
	if parent != nil {
		signer, signerCert = parent.Key, parent.Cert
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &Cert{DER: der, PKCS8: p8, Key: key, Cert: cert}
}
