package asymmetric_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"fmt"

	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/keys"
	_ "github.com/ukeys/ukeys/keys/asymmetric"
)

// A program that imports the package has the type in every Service: a
// PKCS#8 key pair added as an asymmetric key signs a digest, and the key
// verifies its own signature.
func Example() {
	s := keys.New()
	defer s.Close()
	c := s.NewCaller(keys.Cred{UID: 1000, GID: 1000, PID: 1})
	defer c.Release()
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		panic(err)
	}

	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(priv)
	id, err := c.AddKey("asymmetric", "signer", der, keys.SessionKeyring)
	if err != nil {
		panic(err)
	}
	q, _ := c.PkeyQuery(id, "enc=x962 hash=sha256")
	fmt.Printf("%d-bit key, can sign: %v\n", q.KeySize, q.SupportedOps&keyctl.PkeySupportsSign != 0)

	digest := sha256.Sum256([]byte("hello"))
	sig, err := c.PkeySign(id, "enc=x962 hash=sha256", digest[:], int(q.MaxSigSize))
	if err != nil {
		panic(err)
	}
	fmt.Println("verifies:", c.PkeyVerify(id, "enc=x962 hash=sha256", digest[:], sig) == nil)
	// Output:
	// 256-bit key, can sign: true
	// verifies: true
}
