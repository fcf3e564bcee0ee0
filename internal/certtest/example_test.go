package certtest_test

import (
	"crypto/elliptic"
	"fmt"

	"github.com/ukeys/ukeys/internal/certtest"
)

// stop is a certtest.TB outside a test: it panics on the first error.
type stop struct{}

func (stop) Helper()           {}
func (stop) Fatal(args ...any) { panic(fmt.Sprint(args...)) }

// A CA and a P-256 certificate it signs, as the restriction tests use.
func Example() {
	t := stop{}
	ca := certtest.New(t, certtest.Options{CN: "Example CA", O: "Example", CA: true}, nil)
	leaf := certtest.New(t, certtest.Options{CN: "leaf", Serial: 2, Curve: elliptic.P256()}, ca)
	fmt.Println(leaf.Cert.Issuer.CommonName, leaf.Cert.CheckSignatureFrom(ca.Cert) == nil)
	// Output: Example CA true
}
