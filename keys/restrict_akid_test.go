package keys

import (
	"bytes"
	"crypto/elliptic"
	"encoding/pem"
	"errors"
	"math/big"
	"testing"

	"github.com/ukeys/ukeys/internal/certtest"
)

// TestRestrictionChecksTheLinkedCertificate: a certificate linked into a
// restricted keyring is judged by the signer its authority key
// identifier names (by key id, by its certificate's issuer and serial,
// or both; a wrong one of either finds none, as the kernel's
// find_asymmetric_key) and by its signature, read from the key's own
// copy of it. Each certificate is added from a buffer wiped after the
// add, as the daemon wipes a request's once answered, or as PEM, whose
// decoded block is wiped at once: the signature was checked against
// those buffers, and every certificate linked later was EKEYREJECTED
// (keyutils' keyctl/restrict/valid). The server's
// TestRestrictionFindsTheSignerByAKID runs the same against the kernel.
func TestRestrictionChecksTheLinkedCertificate(t *testing.T) {
	e := newEnv(t)
	c := e.caller(0, 0)
	p256 := elliptic.P256()
	root := certtest.New(t, certtest.Options{CN: "root", O: "ukeys", CA: true, Serial: 0x8a11, Curve: p256,
		SKID: []byte{0x0a, 0x11}, SelfAKID: true}, nil)
	leaf := func(serial int64, edit func(*certtest.AKID)) []byte {
		a := root.AKID()
		if edit != nil {
			edit(a)
		}
		return certtest.New(t, certtest.Options{CN: "leaf", Serial: serial, Curve: p256, AKID: a}, root).DER
	}
	inter := certtest.New(t, certtest.Options{CN: "intermediate", CA: true, Serial: 0x20, Curve: p256,
		SKID: []byte{0x1e}, AKID: root.AKID()}, root)
	intLeaf := certtest.New(t, certtest.Options{CN: "leaf of the intermediate", Serial: 0x21, Curve: p256, AKID: inter.AKID()}, inter)

	held := must(c.AddKey("keyring", "held", nil, SessionKeyring))(t)
	add := func(der []byte, ring Serial) Serial {
		t.Helper()
		buf := bytes.Clone(der)
		id := must(c.AddKey("asymmetric", "", buf, ring))(t)
		clear(buf)
		return id
	}
	trust := must(c.AddKey("keyring", "trust", nil, SessionKeyring))(t)
	rootID := add(root.DER, trust)
	restricted := func(name, spec string, first Serial) Serial {
		t.Helper()
		r := must(c.AddKey("keyring", name, nil, SessionKeyring))(t)
		if first != 0 {
			must(0, c.Link(first, r))(t)
		}
		typ := "asymmetric"
		must(0, c.RestrictKeyring(r, &typ, &spec))(t)
		return r
	}
	rings := []struct {
		name string
		id   Serial
	}{
		{"by key", restricted("by key", "key_or_keyring:"+itoa(rootID), 0)},
		{"by keyring", restricted("by keyring", "key_or_keyring:"+itoa(trust), 0)},
		{"chain", restricted("chain", "key_or_keyring:0:chain", rootID)},
	}
	pemLeaf := must(c.AddKey("asymmetric", "", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf(0x16, nil)}), held))(t)
	for _, l := range []struct {
		name string
		id   Serial
		err  error
	}{
		{"key id, issuer and serial", add(leaf(0x10, nil), held), nil},
		{"key id", add(leaf(0x11, func(a *certtest.AKID) { a.Issuer, a.Serial = nil, nil }), held), nil},
		{"issuer and serial", add(leaf(0x12, func(a *certtest.AKID) { a.KeyID = nil }), held), nil},
		{"key id, issuer and serial, added as PEM", pemLeaf, nil},
		{"another serial", add(leaf(0x13, func(a *certtest.AKID) { a.Serial = big.NewInt(0x8a12) }), held), ENOKEY},
		{"another key id", add(leaf(0x14, func(a *certtest.AKID) { a.KeyID = []byte{0x0a, 0x12} }), held), ENOKEY},
	} {
		for _, r := range rings {
			if err := c.Link(l.id, r.id); !errors.Is(err, l.err) {
				t.Errorf("%s, a leaf naming the root by %s: %v, want %v", r.name, l.name, err, l.err)
			}
		}
	}
	// key_or_keyring:RING:chain: what the intermediate signed only once
	// the intermediate is in.
	rc := restricted("keyring chain", "key_or_keyring:"+itoa(trust)+":chain", 0)
	interID, intLeafID := add(inter.DER, held), add(intLeaf.DER, held)
	for _, step := range []struct {
		name string
		id   Serial
		err  error
	}{
		{"the intermediate's leaf", intLeafID, ENOKEY},
		{"the intermediate", interID, nil},
		{"the intermediate's leaf", intLeafID, nil},
	} {
		if err := c.Link(step.id, rc); !errors.Is(err, step.err) {
			t.Errorf("keyring chain, %s: %v, want %v", step.name, err, step.err)
		}
	}
}
