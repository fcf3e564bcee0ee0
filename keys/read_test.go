package keys

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// TestReadIntoAgreesWithRead checks the one-section read path against the
// general one for every state a key can be read in: both must return the
// same payload or the same errno.
func TestReadIntoAgreesWithRead(t *testing.T) {
	e := newEnv(t)
	owner := e.caller(1000, 1000)
	other := e.caller(2000, 2000)
	add := func(desc, payload string) Serial {
		return must(owner.AddKey("user", desc, []byte(payload), SessionKeyring))(t)
	}
	plain := add("plain", "hello")
	revoked := add("revoked", "gone")
	if err := owner.Revoke(revoked); err != nil {
		t.Fatal(err)
	}
	expiring := add("expiring", "soon")
	if err := owner.SetTimeout(expiring, 1); err != nil {
		t.Fatal(err)
	}
	otherReadable := add("world", "for all")
	if err := owner.SetPerm(otherReadable, PermDefault|0x3f); err != nil {
		t.Fatal(err)
	}
	logon := must(owner.AddKey("logon", "svc:pw", []byte("secret"), SessionKeyring))(t)
	ring := must(owner.AddKey("keyring", "nested", nil, SessionKeyring))(t)
	e.clock.advance(2 * time.Second)

	cases := []struct {
		name string
		c    *Caller
		id   Serial
		want string
		err  error
	}{
		{"possessed", owner, plain, "hello", nil},
		{"not possessed, no other read", other, plain, "", EACCES},
		{"not possessed, other read", other, otherReadable, "for all", nil},
		{"revoked", owner, revoked, "", EKEYREVOKED},
		{"expired", owner, expiring, "", EKEYEXPIRED},
		{"logon", owner, logon, "", EOPNOTSUPP},
		{"keyring", owner, ring, "", nil},
		{"absent", owner, 0x7fff0001, "", ENOKEY},
		{"session keyring id", owner, SessionKeyring, "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, werr := tc.c.Read(tc.id)
			if !errors.Is(werr, tc.err) || (tc.err == nil && werr != nil) {
				t.Fatalf("Read error %v, want %v", werr, tc.err)
			}
			if tc.want != "" && string(want) != tc.want {
				t.Fatalf("Read = %q, want %q", want, tc.want)
			}
			buf := make([]byte, 256)
			n, err := tc.c.ReadInto(tc.id, buf)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("ReadInto error %v, Read's %v", err, werr)
			}
			if err == nil && (n != len(want) || !bytes.Equal(buf[:n], want)) {
				t.Fatalf("ReadInto = %d %q, Read = %q", n, buf[:n], want)
			}
		})
	}
}

// TestReadIntoShortBuffer checks keyctl_read's buffer rule: the length is
// always returned, the payload copied only when all of it fits.
func TestReadIntoShortBuffer(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	id := must(c.AddKey("user", "k", []byte("0123456789"), SessionKeyring))(t)
	if n, err := c.ReadInto(id, nil); n != 10 || err != nil {
		t.Fatalf("size query: %d, %v", n, err)
	}
	short := []byte("xxxx")
	if n, err := c.ReadInto(id, short); n != 10 || err != nil || string(short) != "xxxx" {
		t.Fatalf("short buffer: %d, %v, buffer now %q", n, err, short)
	}
	exact := make([]byte, 10)
	if n, err := c.ReadInto(id, exact); n != 10 || err != nil || string(exact) != "0123456789" {
		t.Fatalf("exact buffer: %d, %v, %q", n, err, exact)
	}
	// A keyring reads as its serials through the general path, same rule.
	ring := must(c.AddKey("keyring", "r", nil, SessionKeyring))(t)
	must(c.AddKey("user", "in", []byte("x"), ring))(t)
	if n, err := c.ReadInto(ring, make([]byte, 2)); n != 4 || err != nil {
		t.Fatalf("keyring short buffer: %d, %v", n, err)
	}
}
