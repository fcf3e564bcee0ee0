package certtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"time"
)

// TB is what the makers need of a test: [testing.TB] has it, and so may a
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
	// AKID is the authority key identifier to write; nil: Go's default
	// (the signer's key identifier alone, none when self-signed).
	AKID *AKID
	// SelfAKID names the certificate itself in its authority key
	// identifier, by its SKID (which must be given), subject and serial,
	// as openssl's "keyid,issuer:always" does for a root.
	SelfAKID bool
}

// AKID is an authority key identifier: each part nil is left out.
type AKID struct {
	KeyID  []byte // keyIdentifier [0]
	Issuer []byte // authorityCertIssuer [1]: one directoryName, the DER of a Name
	// (the name of the signer's own issuer)
	Serial *big.Int // authorityCertSerialNumber [2]
}

// AKID names c as the signer of another certificate in every way an
// authority key identifier can: its key identifier, and its certificate
// by that certificate's issuer and serial number (as RFC 5280 has it,
// and openssl's "issuer" writes).
func (c *Cert) AKID() *AKID {
	return &AKID{KeyID: c.Cert.SubjectKeyId, Issuer: c.Cert.RawIssuer, Serial: c.Cert.SerialNumber}
}

var oidAKID = asn1.ObjectIdentifier{2, 5, 29, 35}

// extension is the AKID as an X.509 extension.
func (a *AKID) extension(t TB) pkix.Extension {
	t.Helper()
	var body []byte
	add := func(v asn1.RawValue) {
		b, err := asn1.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		body = append(body, b...)
	}
	ctx := func(tag int, compound bool, b []byte) asn1.RawValue {
		return asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: tag, IsCompound: compound, Bytes: b}
	}
	if a.KeyID != nil {
		add(ctx(0, false, a.KeyID))
	}
	if a.Issuer != nil {
		name, err := asn1.Marshal(ctx(4, true, a.Issuer)) // directoryName, explicitly tagged
		if err != nil {
			t.Fatal(err)
		}
		add(ctx(1, true, name))
	}
	if a.Serial != nil {
		var n asn1.RawValue
		der, err := asn1.Marshal(a.Serial)
		if err == nil {
			_, err = asn1.Unmarshal(der, &n)
		}
		if err != nil {
			t.Fatal(err)
		}
		add(ctx(2, false, n.Bytes))
	}
	v, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: body})
	if err != nil {
		t.Fatal(err)
	}
	return pkix.Extension{Id: oidAKID, Value: v}
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
	akid := o.AKID
	if o.SelfAKID {
		name, err := asn1.Marshal(tmpl.Subject.ToRDNSequence())
		if err != nil {
			t.Fatal(err)
		}
		akid = &AKID{KeyID: o.SKID, Issuer: name, Serial: tmpl.SerialNumber}
	}
	if akid != nil {
		tmpl.ExtraExtensions = []pkix.Extension{akid.extension(t)}
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
