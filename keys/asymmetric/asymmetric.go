package asymmetric

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"

	"github.com/ukeys/ukeys/keys"
)

// The "asymmetric" key type, as the kernel's: a public key from an X.509
// certificate, or a key pair from a PKCS#8 private key, parsed with Go's
// crypto/x509. The kernel's parsers take DER only; ukeys also takes a PEM
// "CERTIFICATE" or "PRIVATE KEY" block, which the kernel refuses with
// EBADMSG. A certificate proposes the key's description when add_key is
// given an empty one: the subject's name (its CN and O, as the kernel
// fabricates it), ": " and the hexadecimal subject key identifier (or the
// serial number). Each certificate carries three identifiers, as the
// kernel's: the serial number with the issuer, the subject key
// identifier, and the subject; "id:HEX" (the tail of one of the first
// two), "ex:HEX" (one of the first two, whole) and "dn:HEX" (the subject)
// find keys by them in searches and restrictions. The key
// cannot be read or updated.

// asymKey is an asymmetric key's parsed form (Payload.Extra). The DER it
// came from is the payload's Data, wiped with it.
type asymKey struct {
	idType string // "X509" for a certificate, "PKCS8" for a private key
	algo   string // the kernel's pkey_algo: "rsa", "ecdsa-nist-p256", …
	pub    crypto.PublicKey
	priv   crypto.Signer // nil for a certificate
	// ids are the kernel's asymmetric_key_ids: serial and issuer, subject
	// key identifier, subject. nil where absent.
	ids [3][]byte
	// sig is the certificate's signature with the ids of the key that
	// made it (the kernel's public_key_signature); nil for PKCS#8.
	sig *certSig
	// desc is the description a certificate proposes.
	desc string

	// mu keeps the private key from being wiped while an operation uses
	// it: operations hold it shared, Wipe exclusively.
	mu    sync.RWMutex
	wiped bool
}

// certSig is a certificate's signature, checked by restricted keyrings.
// It holds copies of its own: the certificate's DER, which Go's parser
// leaves its results pointing into, is the caller's buffer (a request's,
// wiped once answered, or a PEM block's, wiped at once), and a check
// made later, when the certificate is linked, must not read what is
// left of it there.
type certSig struct {
	algo      x509.SignatureAlgorithm
	tbs       []byte // the signed part, RawTBSCertificate
	signature []byte
	// authIDs are the signer's ids as the certificate names them: the
	// authority key identifier's serial and issuer, its key identifier,
	// and the issuer's name (the kernel's auth_ids).
	authIDs [3][]byte
}

// Wipe clears the private key's numbers as far as Go lets them be
// reached (math/big's words); the payload's DER is wiped beside it.
func (a *asymKey) Wipe() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wiped = true
	switch k := a.priv.(type) {
	case *rsa.PrivateKey:
		clear(k.D.Bits())
		for _, p := range k.Primes {
			clear(p.Bits())
		}
		for _, v := range []*big.Int{k.Precomputed.Dp, k.Precomputed.Dq, k.Precomputed.Qinv} {
			if v != nil {
				clear(v.Bits())
			}
		}
	case *ecdsa.PrivateKey:
		if k.D != nil {
			clear(k.D.Bits())
		}
	}
	a.priv = nil
}

func init() { keys.Register(asymmetricType) }

// asymmetricType is the type as keys knows it: the parsing of this file,
// the pkey operations (pkey.go) and the restrictions (restrict.go).
var asymmetricType = &keys.Type{
	Name:     Name,
	Preparse: asymmetricPreparse,
	Describe: asymmetricDescribe,
	ProposeDescription: func(p *keys.Payload) string {
		if a, ok := p.Extra.(*asymKey); ok {
			return a.desc
		}
		return ""
	},
	MatchPreparse: asymmetricMatch,
	// A certificate's self-signature is checked as it is parsed.
	Costly:            true,
	Pkey:              openPkey,
	LookupRestriction: lookupRestriction,
}

// Name is the type's name, as callers give it to add_key.
const Name = "asymmetric"

// asymCharge is what the kernel charges an asymmetric key (quotalen).
const asymCharge = 100

func asymmetricPreparse(data []byte) (*keys.Payload, int, error) {
	return preparse(data, nil)
}

// preparse parses data and makes its payload, unless refuse (if not
// nil) says from the parsed key why not, which is then wiped.
func preparse(data []byte, refuse func(a *asymKey) error) (*keys.Payload, int, error) {
	if len(data) == 0 {
		return nil, 0, keys.EINVAL
	}
	der := data
	if b, _ := pem.Decode(data); b != nil {
		der = b.Bytes
		// Decoded into a buffer of its own, which may hold a private
		// key: the payload keeps its own copy.
		defer clear(b.Bytes)
	}
	a, err := parseCertKey(der)
	if err == errNotCert {
		a, err = parsePKCS8Key(der)
	}
	if err != nil {
		return nil, 0, err
	}
	if refuse != nil {
		if err := refuse(a); err != nil {
			a.Wipe()
			return nil, 0, err
		}
	}
	p := keys.NewPayloadExtra(der, a)
	return p, asymCharge, nil
}

// errNotCert sends a payload that is no certificate to the next parser.
var errNotCert = errors.New("not a certificate")

func parseCertKey(der []byte) (*asymKey, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, errNotCert
	}
	algo, err := pkeyAlgo(cert.PublicKey)
	if err != nil {
		return nil, err
	}
	a := &asymKey{idType: "X509", algo: algo, pub: cert.PublicKey}
	serial, err := rawSerial(cert.RawTBSCertificate)
	if err != nil {
		return nil, keys.EBADMSG
	}
	issuer, subject := asnContent(cert.RawIssuer), asnContent(cert.RawSubject)
	a.ids[0] = concat(serial, issuer)
	if len(cert.SubjectKeyId) > 0 {
		a.ids[1] = bytes.Clone(cert.SubjectKeyId)
	}
	a.ids[2] = bytes.Clone(subject)
	sig := &certSig{algo: cert.SignatureAlgorithm, tbs: bytes.Clone(cert.RawTBSCertificate), signature: bytes.Clone(cert.Signature)}
	if err := akidIDs(cert, sig); err != nil {
		return nil, err
	}
	if sig.authIDs[2] == nil {
		sig.authIDs[2] = bytes.Clone(issuer)
	}
	a.sig = sig
	// A certificate that says it signed itself must have: the kernel
	// rejects one whose self-signature does not verify.
	if bytes.Equal(subject, issuer) {
		self := true
		if sig.authIDs[0] != nil || sig.authIDs[1] != nil {
			x := sig.authIDs[1] != nil && bytes.Equal(a.ids[1], sig.authIDs[1])
			y := sig.authIDs[0] != nil && bytes.Equal(a.ids[0], sig.authIDs[0])
			self = x || y
			if self && x != y && sig.authIDs[0] != nil && sig.authIDs[1] != nil {
				return nil, keys.EKEYREJECTED
			}
		}
		if self && !kernelUsable(a.pub) {
			// Checked before the signature, which costs a modulus's
			// size squared (Go's RSA bounds neither it nor the
			// exponent): the kernel's RSA refuses the key, and so the
			// certificate, with EINVAL.
			return nil, keys.EINVAL
		}
		if self && cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature) != nil {
			return nil, keys.EKEYREJECTED
		}
	}
	name := fabricateName(cert.RawSubject)
	if len(cert.SubjectKeyId) > 0 {
		a.desc = name + ": " + hex.EncodeToString(cert.SubjectKeyId)
	} else {
		a.desc = name + ": " + hex.EncodeToString(serial)
	}
	return a, nil
}

func parsePKCS8Key(der []byte) (*asymKey, error) {
	// Go's parser checks an RSA key's numbers against each other, at a
	// cost of the modulus's size squared, and bounds none: its modulus is
	// read first, and a key the kernel's RSA cannot use is refused before
	// (it checks neither that the numbers are prime, so a huge key costs
	// its maker nothing).
	if n, ok := pkcs8RSAModulus(der); ok && !kernelUsable(&rsa.PublicKey{N: n}) {
		return nil, keys.EBADMSG
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, keys.EBADMSG
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, keys.ENOPKG
	}
	algo, err := pkeyAlgo(s.Public())
	if err != nil {
		return nil, err
	}
	return &asymKey{idType: "PKCS8", algo: algo, pub: s.Public(), priv: s}, nil
}

// pkcs8RSAModulus returns the modulus of a PKCS#8 RSA private key,
// read without the arithmetic Go's parser does; ok is false for anything
// else, which that parser judges.
func pkcs8RSAModulus(der []byte) (*big.Int, bool) {
	var p8 struct {
		Version    int
		Algo       pkix.AlgorithmIdentifier
		PrivateKey []byte
	}
	if _, err := asn1.Unmarshal(der, &p8); err != nil || !p8.Algo.Algorithm.Equal(oidRSAEncryption) {
		return nil, false
	}
	// The key's first two fields; encoding/asn1 leaves the rest unread.
	var k struct {
		Version int
		N       *big.Int
	}
	if _, err := asn1.Unmarshal(p8.PrivateKey, &k); err != nil || k.N == nil {
		return nil, false
	}
	return k.N, true
}

// oidRSAEncryption is rsaEncryption (PKCS #1), the algorithm of an RSA
// key in PKCS#8.
var oidRSAEncryption = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}

// kernelUsable reports whether the kernel's software key subtype could
// use pub: any ECDSA key this package takes, an RSA key only of a size
// its RSA takes (rsaKernelSize).
func kernelUsable(pub crypto.PublicKey) bool {
	if k, ok := pub.(*rsa.PublicKey); ok {
		return rsaKernelSize(k)
	}
	return true
}

// pkeyAlgo names a public key's algorithm as the kernel does; ENOPKG for
// one the kernel's software key subtype has no code for.
func pkeyAlgo(pub crypto.PublicKey) (string, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return "rsa", nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return "ecdsa-nist-p256", nil
		case elliptic.P384():
			return "ecdsa-nist-p384", nil
		case elliptic.P521():
			return "ecdsa-nist-p521", nil
		}
	}
	return "", keys.ENOPKG
}

// rawSerial returns the serial number's content octets as the
// certificate holds them (a leading zero kept), which math/big loses.
func rawSerial(tbs []byte) ([]byte, error) {
	var seq asn1.RawValue
	if _, err := asn1.Unmarshal(tbs, &seq); err != nil {
		return nil, err
	}
	rest := seq.Bytes
	for {
		var v asn1.RawValue
		var err error
		if rest, err = asn1.Unmarshal(rest, &v); err != nil {
			return nil, err
		}
		if v.Class == asn1.ClassContextSpecific && v.Tag == 0 {
			continue // the version
		}
		if v.Class != asn1.ClassUniversal || v.Tag != asn1.TagInteger {
			return nil, errors.New("no serial number")
		}
		return v.Bytes, nil
	}
}

// asnContent returns the content octets of a DER element (a Name's,
// without its SEQUENCE header), which is what the kernel's ids hold.
func asnContent(der []byte) []byte {
	var v asn1.RawValue
	if _, err := asn1.Unmarshal(der, &v); err != nil {
		return nil
	}
	return v.Bytes
}

func concat(a, b []byte) []byte {
	out := make([]byte, 0, len(a)+len(b))
	return append(append(out, a...), b...)
}

var (
	oidAKID         = asn1.ObjectIdentifier{2, 5, 29, 35}
	oidCommonName   = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidOrganization = asn1.ObjectIdentifier{2, 5, 4, 10}
	oidEmail        = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}
)

// akidIDs reads the authority key identifier extension: its key
// identifier (auth_ids[1]) and its issuer and serial (auth_ids[0]).
func akidIDs(cert *x509.Certificate, sig *certSig) error {
	for _, e := range cert.Extensions {
		if !e.Id.Equal(oidAKID) {
			continue
		}
		var seq asn1.RawValue
		if _, err := asn1.Unmarshal(e.Value, &seq); err != nil {
			return keys.EBADMSG
		}
		rest := seq.Bytes
		var issuer, serial []byte
		for len(rest) > 0 {
			var v asn1.RawValue
			var err error
			if rest, err = asn1.Unmarshal(rest, &v); err != nil {
				return keys.EBADMSG
			}
			if v.Class != asn1.ClassContextSpecific {
				continue
			}
			switch v.Tag {
			case 0:
				sig.authIDs[1] = bytes.Clone(v.Bytes)
			case 1: // GeneralNames: the first directoryName
				names := v.Bytes
				for len(names) > 0 && issuer == nil {
					var n asn1.RawValue
					if names, err = asn1.Unmarshal(names, &n); err != nil {
						return keys.EBADMSG
					}
					if n.Class == asn1.ClassContextSpecific && n.Tag == 4 {
						issuer = asnContent(n.Bytes)
					}
				}
			case 2:
				serial = v.Bytes
			}
		}
		if serial != nil && issuer != nil {
			sig.authIDs[0] = concat(serial, issuer)
		}
	}
	return nil
}

// fabricateName makes the kernel's name for a certificate's subject from
// its last CN, O and email attributes: the CN alone if it starts with the
// O (or with its first seven bytes), else "O: CN"; the CN, O or email
// alone when only one is there; nothing when none is.
func fabricateName(rawName []byte) string {
	var seq asn1.RawValue
	if _, err := asn1.Unmarshal(rawName, &seq); err != nil {
		return ""
	}
	var cn, o, email []byte
	rest := seq.Bytes
	for len(rest) > 0 {
		var set asn1.RawValue
		var err error
		if rest, err = asn1.Unmarshal(rest, &set); err != nil {
			return ""
		}
		attrs := set.Bytes
		for len(attrs) > 0 {
			var atv struct {
				Type  asn1.ObjectIdentifier
				Value asn1.RawValue
			}
			if attrs, err = asn1.Unmarshal(attrs, &atv); err != nil {
				return ""
			}
			switch {
			case atv.Type.Equal(oidCommonName):
				cn = atv.Value.Bytes
			case atv.Type.Equal(oidOrganization):
				o = atv.Value.Bytes
			case atv.Type.Equal(oidEmail):
				email = atv.Value.Bytes
			}
		}
	}
	switch {
	case len(cn) > 0 && len(o) > 0:
		if len(cn) >= len(o) && bytes.Equal(cn[:len(o)], o) ||
			len(cn) >= 7 && len(o) >= 7 && bytes.Equal(cn[:7], o[:7]) {
			return string(cn)
		}
		return string(o) + ": " + string(cn)
	case len(cn) > 0:
		return string(cn)
	case len(o) > 0:
		return string(o)
	}
	return string(email)
}

// asymmetricDescribe is what /proc/keys shows after the description: the
// subtype ("X509.rsa"), the last four bytes of the subject key
// identifier in hexadecimal, and "[]" (the kernel's placeholder for the
// key's capabilities).
func asymmetricDescribe(k *keys.Key, p *keys.Payload) string {
	if p == nil {
		return "" // revoked: its payload is gone
	}
	a, ok := p.Extra.(*asymKey)
	if !ok {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, ": %s.%s", a.idType, a.algo)
	if id := a.ids[1]; id != nil {
		b.WriteByte(' ')
		b.WriteString(hex.EncodeToString(id[max(len(id)-4, 0):]))
	}
	b.WriteString(" []")
	return b.String()
}

// asymmetricMatch is the kernel's asymmetric_key_match_preparse: "id:HEX"
// matches a key whose first or second id ends with those bytes, "ex:HEX"
// one whose first or second id is exactly those bytes, "dn:HEX" one whose
// third id (its subject) is; anything else is an ordinary description
// match (nil). An empty description, or an odd number or non-hexadecimal
// digits after the prefix, fail with EINVAL.
func asymmetricMatch(desc string) (func(p *keys.Payload) bool, error) {
	if desc == "" {
		return nil, keys.EINVAL
	}
	var how idMatch
	switch {
	case strings.HasPrefix(desc, "id:"):
		how = idPartial
	case strings.HasPrefix(desc, "ex:"):
		how = idExact
	case strings.HasPrefix(desc, "dn:"):
		how = idName
	default:
		return nil, nil
	}
	want, err := hexID(desc[3:])
	if err != nil {
		return nil, err
	}
	return idMatcher(want, how), nil
}

// idMatcher accepts the payloads of asymmetric keys whose ids match want
// as how says.
func idMatcher(want []byte, how idMatch) func(p *keys.Payload) bool {
	return func(p *keys.Payload) bool {
		a, ok := p.Extra.(*asymKey)
		return ok && a.matchID(want, how)
	}
}

// idMatch is how an id lookup compares.
type idMatch int

const (
	idExact   idMatch = iota // the first or second id, whole
	idPartial                // the tail of the first or second id
	idName                   // the third id, whole
)

// hexID decodes the hexadecimal of an id: an even number of digits, of
// either case.
func hexID(h string) ([]byte, error) {
	if len(h) == 0 || len(h)%2 != 0 {
		return nil, keys.EINVAL
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return nil, keys.EINVAL
	}
	return b, nil
}

// matchID reports whether a's ids match want as how says.
func (a *asymKey) matchID(want []byte, how idMatch) bool {
	if how == idName {
		return a.ids[2] != nil && bytes.Equal(a.ids[2], want)
	}
	for _, id := range a.ids[:2] {
		if id == nil {
			continue
		}
		if how == idPartial && len(id) >= len(want) && bytes.Equal(id[len(id)-len(want):], want) ||
			how == idExact && bytes.Equal(id, want) {
			return true
		}
	}
	return false
}
