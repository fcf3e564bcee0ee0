package keys

import (
	"bytes"
	"crypto/elliptic"
	"errors"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/internal/certtest"
)

// Payloads chosen to hurt the daemon, each found by an audit: every one
// either crashed it (a panic in the daemon takes every user's keys) or
// made a key that no state stream could carry, so that the next
// hand-over or restart under systemd lost every user's keys.

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
