package keys

import (
	"bytes"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/certtest"
)

// Payloads chosen to hurt the daemon, each found by an audit: every one
// either crashed it (a panic in the daemon takes every user's keys) or
// made a key that no state stream could carry, so that the next
// hand-over or restart under systemd lost every user's keys.

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
	id := must(attacker.AddKey("asymmetric", "tiny", der, SessionKeyring))(t)
	if _, err := attacker.PkeyQuery(id, "enc=pkcs1"); !errors.Is(err, EINVAL) {
		t.Errorf("query of a one-byte RSA key: %v, want EINVAL", err)
	}
	if err := attacker.PkeyVerify(id, "enc=pkcs1", nil, []byte{2}); !errors.Is(err, EINVAL) {
		t.Errorf("verify with a one-byte RSA key: %v, want EINVAL", err)
	}
	if _, err := attacker.PkeyEncrypt(id, "enc=pkcs1", []byte{1}, 64); !errors.Is(err, EINVAL) {
		t.Errorf("encrypt with a one-byte RSA key: %v, want EINVAL", err)
	}
	for bits, ok := range map[int]bool{511: true, 512: true, 513: false, 1024: true, 2047: true, 4096: true, 4097: false, 8192: false} {
		n := new(big.Int).SetBit(new(big.Int), bits-1, 1)
		if got := rsaKernelSize(&rsa.PublicKey{N: n, E: 65537}); got != ok {
			t.Errorf("a modulus of %d bits: usable %v, want %v (the kernel counts 64-bit limbs)", bits, got, ok)
		}
	}
}

// /proc/keys shows a revoked asymmetric key (it stays positive, its
// payload gone): describing it once dereferenced the missing payload.
func TestProcKeysShowsARevokedAsymmetricKey(t *testing.T) {
	e := newEnv(t)
	owner := e.caller(2000, 2000)
	cert := certtest.New(t, certtest.Options{CN: "x", Curve: elliptic.P256()}, nil)
	id := must(owner.AddKey("asymmetric", "a", cert.DER, SessionKeyring))(t)
	noErr(t, owner.Revoke(id))
	if pk := owner.ProcKeys(); !strings.Contains(pk, " asymmetri a\n") {
		t.Fatalf("the revoked key's line in /proc/keys:\n%s", pk)
	}
}

// An encrypted key's master-key name may be as long as a description
// (the kernel takes one of 300 bytes): its export once wrote each field's
// length in a byte, which wrapped, and the stream could not be read.
func TestLongEncryptedFieldsCrossAHandOver(t *testing.T) {
	e := newEnv(t)
	victim := e.caller(1000, 1000)
	must(victim.AddKey("user", "victim-secret", []byte("hunter2"), SessionKeyring))(t)
	attacker := e.caller(2000, 2000)
	master := "user:" + strings.Repeat("A", 300)
	long := must(attacker.AddKey("encrypted", "long-master", []byte("new "+master+" 32"), SessionKeyring))(t)
	zeros := must(attacker.AddKey("encrypted", "long-datalen", []byte("new user:m "+strings.Repeat("0", 298)+"32"), SessionKeyring))(t)
	var buf bytes.Buffer
	noErr(t, e.s.Export(&buf))
	rs, err := Import(&buf, WithClock(e.clock.now))
	if err != nil {
		t.Fatalf("Import of a stream this daemon exported: %v", err)
	}
	defer rs.Service().Close()
	defer rs.Done()
	for _, id := range []Serial{long, zeros} {
		k := rs.Service().lookup(id)
		if k == nil {
			t.Fatalf("key %d did not cross", id)
		}
		before, after := e.s.lookup(id).loadPayload().Extra.(*encMeta), k.loadPayload().Extra.(*encMeta)
		if before.master != after.master || before.datalen != after.datalen || before.format != after.format {
			t.Errorf("key %d: %+v before, %+v after", id, before, after)
		}
	}
}

// A field of an encrypted key's export reads back as written at every
// length, and the one-byte lengths of streams written before long fields
// were carried read as they did.
func TestEncFieldRoundTrip(t *testing.T) {
	for _, n := range []int{1, 2, 254, 255, 256, 300, 70000} {
		f := strings.Repeat("x", n)
		b := appendEncField(nil, f)
		got, rest, ok := encField(append(b, "tail"...))
		if !ok || got != f || string(rest) != "tail" {
			t.Errorf("a field of %d bytes: %v, read back %d bytes, rest %q", n, ok, len(got), rest)
		}
		if n < 256 && (b[0] != byte(n) || len(b) != 1+n) {
			t.Errorf("a field of %d bytes is not written as before", n)
		}
	}
	for _, bad := range [][]byte{nil, {5, 'a'}, {0}, {0, 0x80}, {0, 10, 'a'}} {
		if _, _, ok := encField(bad); ok {
			t.Errorf("%q read as a field", bad)
		}
	}
}

// An asymmetric key added without a description takes the one its
// certificate proposes, from a subject of any length: a proposal longer
// than a description may be is refused, as a caller's would be, or the
// key would be one that no state stream carries.
func TestProposedDescriptionsAreBounded(t *testing.T) {
	e := newEnv(t)
	attacker := e.caller(2000, 2000)
	cert := certtest.New(t, certtest.Options{CN: strings.Repeat("C", 5000), Curve: elliptic.P256()}, nil)
	if _, err := attacker.AddKey("asymmetric", "", cert.DER, SessionKeyring); !errors.Is(err, EINVAL) {
		t.Fatalf("a certificate proposing a description of over 5000 bytes: %v, want EINVAL", err)
	}
	var buf bytes.Buffer
	noErr(t, e.s.Export(&buf))
	rs, err := Import(&buf, WithClock(e.clock.now))
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	rs.Done()
	rs.Service().Close()
}
