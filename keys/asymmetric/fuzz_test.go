package asymmetric

import (
	"crypto/elliptic"
	"errors"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/internal/certtest"
	"github.com/ukeys/ukeys/keys"
)

// FuzzAsymmetricPreparse feeds the certificate and PKCS#8 parsers any
// bytes: they answer a key or the kernel's errors, never panic, and a
// key they answer has the ids and description its describe line shows.
func FuzzAsymmetricPreparse(f *testing.F) {
	ca := certtest.New(f, certtest.Options{CN: "fuzz CA", O: "fuzz", CA: true}, nil)
	leaf := certtest.New(f, certtest.Options{CN: "leaf", Serial: 3, Curve: elliptic.P256()}, ca)
	for _, b := range [][]byte{ca.DER, ca.PKCS8, leaf.DER, leaf.PKCS8, ca.DER[:40], []byte("-----BEGIN CERTIFICATE-----\n")} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, charge, err := asymmetricPreparse(b)
		if err != nil {
			for _, want := range []error{keys.EINVAL, keys.EBADMSG, keys.ENOPKG, keys.EKEYREJECTED} {
				if errors.Is(err, want) {
					return
				}
			}
			t.Fatalf("error %v is none of the kernel's", err)
		}
		a := p.Extra.(*asymKey)
		defer func() { clear(p.Data); a.Wipe() }()
		if charge != asymCharge || a.algo == "" || a.pub == nil {
			t.Fatalf("incomplete key: %+v", a)
		}
		if a.sig != nil && !strings.Contains(a.desc, ": ") {
			t.Fatalf("certificate description %q", a.desc)
		}
		if !strings.HasPrefix(asymmetricDescribe(nil, p), ": "+a.idType+"."+a.algo) {
			t.Fatalf("describe %q", asymmetricDescribe(nil, p))
		}
	})
}

// FuzzAsymmetricMatch: id lookups parse as the kernel's, or fail with
// EINVAL.
func FuzzAsymmetricMatch(f *testing.F) {
	for _, s := range []string{"id:0102", "ex:", "dn:ab", "plain description", "id:abc", "ex:ZZ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := asymmetricMatch(s)
		switch {
		case err != nil && !errors.Is(err, keys.EINVAL):
			t.Fatalf("%q: %v", s, err)
		case err == nil && m == nil && (strings.HasPrefix(s, "id:") || strings.HasPrefix(s, "ex:") || strings.HasPrefix(s, "dn:")):
			t.Fatalf("%q: no matcher", s)
		case m != nil:
			m(&keys.Payload{}) // a payload that is no key matches nothing
		}
	})
}
