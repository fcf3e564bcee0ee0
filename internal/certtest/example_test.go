package certtest_test

import (
	"crypto/elliptic"
	"fmt"
	"testing"

	"github.com/ukeys/ukeys/internal/certtest"
)

// A CA and a P-256 certificate it signs, as the restriction tests use.
func Example() {
	t := &testing.T{}
	ca := certtest.New(t, certtest.Options{CN: "Example CA", O: "Example", CA: true}, nil)
	leaf := certtest.New(t, certtest.Options{CN: "leaf", Serial: 2, Curve: elliptic.P256()}, ca)
	fmt.Println(leaf.Cert.Issuer.CommonName, leaf.Cert.CheckSignatureFrom(ca.Cert) == nil)
	// Output: Example CA true
}
