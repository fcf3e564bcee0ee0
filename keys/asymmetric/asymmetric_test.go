package asymmetric

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/internal/certtest"
	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/keys"
)

func TestAsymmetricDescriptionAndIDs(t *testing.T) {
	e := newEnv(t)
	c := e.caller(0, 0)
	ca := certtest.New(t, certtest.Options{CN: "Test CA", O: "Example Org", CA: true, SKID: []byte{0xab, 0xcd, 0x01, 0x02, 0x03}}, nil)
	id := must(c.AddKey("asymmetric", "", ca.DER, keys.SessionKeyring))(t)
	d := must(c.Describe(id))(t)
	if want := "Example Org: Test CA: abcd010203"; d.Description != want {
		t.Errorf("description %q, want %q", d.Description, want)
	}
	if d.Perm != 0x39010000 {
		t.Errorf("perm %08x, want the kernel's 39010000", uint32(d.Perm))
	}
	if !strings.Contains(c.ProcKeys(), "Example Org: Test CA: abcd010203: X509.rsa cd010203 []") {
		t.Errorf("/proc/keys:\n%s", c.ProcKeys())
	}
	// The CN alone when it starts with the O; a PEM certificate reads too.
	leaf := certtest.New(t, certtest.Options{CN: "Example Org signing key", O: "Example Org", Serial: 0x80, Curve: elliptic.P256()}, ca)
	pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.DER})
	lid := must(c.AddKey("asymmetric", "", pemCert, keys.SessionKeyring))(t)
	// No SKID: the raw serial, its leading zero kept.
	if d := must(c.Describe(lid))(t); d.Description != "Example Org signing key: 0080" {
		t.Errorf("leaf description %q", d.Description)
	}
	for _, tc := range []struct {
		desc string
		want keys.Serial
		err  error
	}{
		{"id:0203", id, nil},          // the tail of the SKID
		{"id:ABCD010203", id, nil},    // either case
		{"ex:abcd010203", id, nil},    // the whole SKID
		{"ex:010203", 0, keys.ENOKEY}, // not whole
		{"ex:0080" + hex.EncodeToString(rawName(t, leaf.Cert.RawIssuer)), lid, nil}, // serial and issuer
		{"dn:" + hex.EncodeToString(rawName(t, ca.Cert.RawSubject)), id, nil},       // the subject
		{"id:abc", 0, keys.EINVAL},
		{"ex:", 0, keys.EINVAL},
		{"id:zz", 0, keys.EINVAL},
		{"Example Org: Test CA: abcd010203", id, nil}, // the description
	} {
		got, err := c.Search(keys.SessionKeyring, "asymmetric", tc.desc, 0)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("search %q: %v, %v; want %v, %v", tc.desc, got, err, tc.want, tc.err)
		}
	}
	// Unreadable, not updatable; the same description again replaces the link.
	if _, err := c.Read(id); !errors.Is(err, keys.EOPNOTSUPP) {
		t.Errorf("read: %v", err)
	}
	if err := c.Update(id, ca.DER); !errors.Is(err, keys.EACCES) {
		t.Errorf("update: %v, want EACCES (no write permission)", err)
	}
	again := must(c.AddKey("asymmetric", "", ca.DER, keys.SessionKeyring))(t)
	if again == id {
		t.Error("add of the same certificate updated the key in place")
	}
	for _, bad := range []struct {
		name string
		data []byte
		err  error
	}{
		{"empty", nil, keys.EINVAL},
		{"garbage", []byte("not a certificate"), keys.EBADMSG},
		{"truncated", ca.DER[:len(ca.DER)/2], keys.EBADMSG},
	} {
		if _, err := c.AddKey("asymmetric", "x", bad.data, keys.SessionKeyring); !errors.Is(err, bad.err) {
			t.Errorf("%s: %v, want %v", bad.name, err, bad.err)
		}
	}
	// A private key proposes no description.
	if _, err := c.AddKey("asymmetric", "", ca.PKCS8, keys.SessionKeyring); !errors.Is(err, keys.EINVAL) {
		t.Errorf("pkcs8 without a description: %v", err)
	}
}

func rawName(t *testing.T, der []byte) []byte {
	t.Helper()
	c := asnContent(der)
	if c == nil {
		t.Fatal("bad name")
	}
	return c
}

func TestAsymmetricTamperedSelfSignedIsRejected(t *testing.T) {
	e := newEnv(t)
	c := e.caller(0, 0)
	ca := certtest.New(t, certtest.Options{CN: "CA", CA: true}, nil)
	bad := append([]byte(nil), ca.DER...)
	bad[len(bad)-1] ^= 1 // the signature's last byte
	if _, err := c.AddKey("asymmetric", "", bad, keys.SessionKeyring); !errors.Is(err, keys.EKEYREJECTED) {
		t.Errorf("tampered self-signed certificate: %v, want EKEYREJECTED", err)
	}
}

// The pkey operations with an RSA key pair and its certificate: results
// checked with the standard library, errors as the kernel's.
func TestPkeyRSA(t *testing.T) {
	e := newEnv(t)
	c := e.caller(0, 0)
	ca := certtest.New(t, certtest.Options{CN: "rsa", CA: true}, nil)
	pub := must(c.AddKey("asymmetric", "", ca.DER, keys.SessionKeyring))(t)
	priv := must(c.AddKey("asymmetric", "rsa private", ca.PKCS8, keys.SessionKeyring))(t)
	rk := ca.Key.(*rsa.PrivateKey)

	for _, tc := range []struct {
		id   keys.Serial
		info string
		want keys.PkeyQuery
		err  error
	}{
		{pub, "", keys.PkeyQuery{SupportedOps: 0x1, KeySize: 2048, MaxDataSize: 256, MaxSigSize: 256, MaxEncSize: 256, MaxDecSize: 256}, nil},
		{pub, "enc=pkcs1 hash=sha256", keys.PkeyQuery{SupportedOps: 0x9, KeySize: 2048, MaxDataSize: 256, MaxSigSize: 256, MaxEncSize: 256, MaxDecSize: 256}, nil},
		{priv, "enc=raw", keys.PkeyQuery{SupportedOps: 0x3, KeySize: 2048, MaxDataSize: 256, MaxSigSize: 256, MaxEncSize: 256, MaxDecSize: 256}, nil},
		{priv, " enc=pkcs1\thash=sha512 ", keys.PkeyQuery{SupportedOps: 0xf, KeySize: 2048, MaxDataSize: 256, MaxSigSize: 256, MaxEncSize: 256, MaxDecSize: 256}, nil},
		{pub, "enc=oaep", keys.PkeyQuery{}, keys.EINVAL},
		{pub, "enc=raw hash=sha256", keys.PkeyQuery{}, keys.EINVAL},
		{pub, "enc=pkcs1 hash=foo", keys.PkeyQuery{}, keys.EINVAL},
		{pub, "enc=pkcs1 enc=pkcs1", keys.PkeyQuery{}, keys.EINVAL},
		{pub, "enc=", keys.PkeyQuery{}, keys.EINVAL},
		{pub, "foo=bar", keys.PkeyQuery{}, keys.EINVAL},
		{pub, "enc=pkcs1,hash=sha256", keys.PkeyQuery{}, keys.EINVAL},
		{123456, "", keys.PkeyQuery{}, keys.ENOKEY},
		{123456, "bad", keys.PkeyQuery{}, keys.EINVAL}, // the string is read first
		{keys.SessionKeyring, "", keys.PkeyQuery{}, keys.EOPNOTSUPP},
	} {
		got, err := c.PkeyQuery(tc.id, tc.info)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("query %d %q: %+v, %v; want %+v, %v", tc.id, tc.info, got, err, tc.want, tc.err)
		}
	}
	if q := must(c.PkeyQuery(pub, ""))(t).Bytes(); len(q) != 56 || q[0] != 1 || q[4] != 0 || q[5] != 8 {
		t.Errorf("query bytes % x", q)
	}

	// Encrypt with the certificate, decrypt with the private key and the
	// standard library.
	msg := []byte("hello world")
	ct := must(c.PkeyEncrypt(pub, "enc=pkcs1", msg, 256))(t)
	if pt, err := rsa.DecryptPKCS1v15(nil, rk, ct); err != nil || string(pt) != string(msg) {
		t.Errorf("stdlib decrypt of ukeys' ciphertext: %q, %v", pt, err)
	}
	if pt := must(c.PkeyDecrypt(priv, "enc=pkcs1", ct, 256))(t); string(pt) != string(msg) {
		t.Errorf("decrypt: %q", pt)
	}
	if _, err := c.PkeyDecrypt(priv, "enc=pkcs1", ct, 5); !errors.Is(err, keys.EOVERFLOW) {
		t.Errorf("decrypt into 5 bytes: %v", err)
	}
	if _, err := c.PkeyDecrypt(priv, "enc=pkcs1", ct[1:], 256); !errors.Is(err, keys.EINVAL) {
		t.Errorf("decrypt of a short block: %v", err)
	}
	if _, err := c.PkeyDecrypt(pub, "enc=pkcs1", ct, 256); !errors.Is(err, keys.EINVAL) {
		t.Errorf("decrypt with a certificate: %v", err)
	}
	if _, err := c.PkeyEncrypt(pub, "enc=pkcs1", make([]byte, 246), 256); !errors.Is(err, keys.EOVERFLOW) {
		t.Errorf("encrypt of 246 bytes: %v", err)
	}
	if _, err := c.PkeyEncrypt(pub, "enc=pkcs1", msg, 257); !errors.Is(err, keys.EINVAL) {
		t.Errorf("encrypt into 257: %v", err)
	}
	if _, err := c.PkeyEncrypt(pub, "enc=pkcs1", msg, 100); !errors.Is(err, keys.EOVERFLOW) {
		t.Errorf("encrypt into 100: %v", err)
	}
	// Raw RSA both ways; 1 and all ones are out of range.
	block := make([]byte, 256)
	block[255] = 7
	raw := must(c.PkeyEncrypt(pub, "", block, 256))(t)
	if back := must(c.PkeyDecrypt(priv, "", raw, 256))(t); string(back) != string(block) {
		t.Error("raw round trip differs")
	}
	for _, in := range [][]byte{{1}, []byte(strings.Repeat("\xff", 256))} {
		if _, err := c.PkeyEncrypt(pub, "", in, 256); !errors.Is(err, keys.EINVAL) {
			t.Errorf("raw encrypt of % x…: %v", in[:1], err)
		}
	}

	// Sign with ukeys, verify with the standard library and ukeys; sign
	// with the standard library, verify with ukeys.
	digest := sha256.Sum256(msg)
	sig := must(c.PkeySign(priv, "enc=pkcs1 hash=sha256", digest[:], 256))(t)
	if err := rsa.VerifyPKCS1v15(&rk.PublicKey, crypto.SHA256, digest[:], sig); err != nil {
		t.Errorf("stdlib rejects ukeys' signature: %v", err)
	}
	std, _ := rsa.SignPKCS1v15(rand.Reader, rk, crypto.SHA256, digest[:])
	if err := c.PkeyVerify(pub, "enc=pkcs1 hash=sha256", digest[:], std); err != nil {
		t.Errorf("verify of a stdlib signature: %v", err)
	}
	bad := digest
	bad[0] ^= 1
	type1 := func(t []byte) []byte { // a valid block with other contents
		em := make([]byte, 256)
		em[1] = 1
		for i := 2; i < 256-len(t)-1; i++ {
			em[i] = 0xff
		}
		copy(em[256-len(t):], t)
		s, _ := rawRSADecrypt(rk, em) // m^d mod n: a signature of em
		return s
	}
	for _, tc := range []struct {
		name, info  string
		digest, sig []byte
		err         error
	}{
		{"wrong digest", "enc=pkcs1 hash=sha256", bad[:], std, keys.EKEYREJECTED},
		{"short signature", "enc=pkcs1 hash=sha256", digest[:], std[1:], keys.EINVAL},
		{"digest of the wrong size", "enc=pkcs1 hash=sha256", digest[:31], std, keys.EINVAL},
		{"other hash", "enc=pkcs1 hash=sha384", digest[:], std, keys.EINVAL},
		{"raw encoding", "", digest[:], std, keys.ENOENT},
		{"wrong prefix", "enc=pkcs1 hash=sha1", digest[:20], type1(append(digestInfoPrefix(pkeyHashes["sha256"]), digest[:]...)), keys.EBADMSG},
		{"no DigestInfo after the padding", "enc=pkcs1 hash=sha256", digest[:], type1(nil), keys.EBADMSG},
	} {
		if err := c.PkeyVerify(pub, tc.info, tc.digest, tc.sig); !errors.Is(err, tc.err) {
			t.Errorf("verify, %s: %v, want %v", tc.name, err, tc.err)
		}
	}
	if _, err := c.PkeySign(priv, "enc=pkcs1 hash=sha256", digest[:31], 256); !errors.Is(err, keys.EINVAL) {
		t.Errorf("sign of a short digest: %v", err)
	}
	if _, err := c.PkeySign(pub, "enc=pkcs1 hash=sha256", digest[:], 256); !errors.Is(err, keys.EINVAL) {
		t.Errorf("sign with a certificate: %v", err)
	}
	if _, err := c.PkeySign(priv, "", digest[:], 256); !errors.Is(err, keys.EINVAL) {
		t.Errorf("raw sign: %v", err)
	}
	// Revoked: no operation reaches the key.
	must(0, c.Revoke(priv))(t)
	if _, err := c.PkeySign(priv, "enc=pkcs1 hash=sha256", digest[:], 256); !errors.Is(err, keys.EKEYREVOKED) {
		t.Errorf("sign with a revoked key: %v", err)
	}
}

func TestPkeyECDSA(t *testing.T) {
	e := newEnv(t)
	c := e.caller(0, 0)
	for _, curve := range []elliptic.Curve{elliptic.P256(), elliptic.P384()} {
		ca := certtest.New(t, certtest.Options{CN: "ec", CA: true, Curve: curve}, nil)
		pub := must(c.AddKey("asymmetric", "", ca.DER, keys.SessionKeyring))(t)
		priv := must(c.AddKey("asymmetric", "ec private "+curve.Params().Name, ca.PKCS8, keys.SessionKeyring))(t)
		ek := ca.Key.(*ecdsa.PrivateKey)
		n := (curve.Params().BitSize + 7) / 8
		q := must(c.PkeyQuery(pub, "enc=x962 hash=sha256"))(t)
		if q.SupportedOps != keyctl.PkeySupportsVerify || q.KeySize != uint32(curve.Params().BitSize) || q.MaxDataSize != 64 || q.MaxEncSize != 0 {
			t.Errorf("%s query: %+v", curve.Params().Name, q)
		}
		if q := must(c.PkeyQuery(pub, "enc=p1363 hash=sha256"))(t); q.MaxSigSize != uint16(2*n) {
			t.Errorf("p1363 max sig %d", q.MaxSigSize)
		}
		if _, err := c.PkeyQuery(pub, ""); !errors.Is(err, keys.EINVAL) {
			t.Errorf("query with raw: %v", err)
		}
		if _, err := c.PkeyQuery(pub, "enc=x962"); !errors.Is(err, keys.EINVAL) {
			t.Errorf("query without a hash: %v", err)
		}
		digest := sha256.Sum256([]byte("data"))
		std, _ := ecdsa.SignASN1(rand.Reader, ek, digest[:])
		if err := c.PkeyVerify(pub, "enc=x962 hash=sha256", digest[:], std); err != nil {
			t.Errorf("verify of a stdlib signature: %v", err)
		}
		bad := digest
		bad[3] ^= 1
		if err := c.PkeyVerify(pub, "enc=x962 hash=sha256", bad[:], std); !errors.Is(err, keys.EKEYREJECTED) {
			t.Errorf("wrong digest: %v", err)
		}
		if err := c.PkeyVerify(pub, "enc=x962 hash=sha256", digest[:], []byte{0x30, 0x02, 0x01}); !errors.Is(err, keys.EBADMSG) {
			t.Errorf("broken DER: %v", err)
		}
		for _, enc := range []string{"x962", "p1363"} {
			max := must(c.PkeyQuery(priv, "enc="+enc+" hash=sha256"))(t).MaxSigSize
			sig := must(c.PkeySign(priv, "enc="+enc+" hash=sha256", digest[:], int(max)))(t)
			if err := c.PkeyVerify(pub, "enc="+enc+" hash=sha256", digest[:], sig); err != nil {
				t.Errorf("%s: verify of ukeys' signature: %v", enc, err)
			}
			if enc == "x962" && !ecdsa.VerifyASN1(&ek.PublicKey, digest[:], sig) {
				t.Error("stdlib rejects ukeys' signature")
			}
		}
		if _, err := c.PkeyEncrypt(pub, "enc=x962 hash=sha256", digest[:], 0); !errors.Is(err, keys.EINVAL) {
			t.Errorf("ECDSA encrypt: %v", err)
		}
	}
}

func TestAsymmetricRestrictions(t *testing.T) {
	e := newEnv(t)
	c := e.caller(0, 0)
	ca := certtest.New(t, certtest.Options{CN: "CA", CA: true}, nil)
	other := certtest.New(t, certtest.Options{CN: "Other CA", CA: true}, nil)
	signed := certtest.New(t, certtest.Options{CN: "leaf", Serial: 2, Curve: elliptic.P256()}, ca)
	stranger := certtest.New(t, certtest.Options{CN: "stranger", Serial: 3}, other)
	self := certtest.New(t, certtest.Options{CN: "self"}, nil)

	trust := must(c.AddKey("keyring", "trust", nil, keys.SessionKeyring))(t)
	caID := must(c.AddKey("asymmetric", "", ca.DER, trust))(t)
	user := must(c.AddKey("user", "u", []byte("x"), keys.SessionKeyring))(t)
	restrict := func(name, spec string) keys.Serial {
		r := must(c.AddKey("keyring", name, nil, keys.SessionKeyring))(t)
		typ := "asymmetric"
		must(0, c.RestrictKeyring(r, &typ, &spec))(t)
		return r
	}
	byKey := restrict("by-key", "key_or_keyring:"+itoa(caID))
	byRing := restrict("by-ring", "key_or_keyring:"+itoa(trust))
	chain := restrict("chain", "key_or_keyring:0:chain")

	for _, ring := range []keys.Serial{byKey, byRing} {
		if _, err := c.AddKey("asymmetric", "", signed.DER, ring); err != nil {
			t.Errorf("ring %d: a certificate the CA signed: %v", ring, err)
		}
		for _, tc := range []struct {
			name string
			data []byte
			err  error
		}{
			{"self-signed", self.DER, keys.ENOKEY},
			{"signed by another CA", stranger.DER, keys.ENOKEY},
			{"private key", ca.PKCS8, keys.ENOPKG},
		} {
			if _, err := c.AddKey("asymmetric", "k", tc.data, ring); !errors.Is(err, tc.err) {
				t.Errorf("ring %d, %s: %v, want %v", ring, tc.name, err, tc.err)
			}
		}
		if err := c.Link(user, ring); !errors.Is(err, keys.EOPNOTSUPP) {
			t.Errorf("ring %d, a user key: %v", ring, err)
		}
		if err := c.Link(trust, ring); !errors.Is(err, keys.EOPNOTSUPP) {
			t.Errorf("ring %d, a keyring: %v", ring, err)
		}
	}
	// chain: the CA itself is refused (it signed itself, and the keyring
	// holds no signer yet), until linked by a way around the restriction…
	if _, err := c.AddKey("asymmetric", "", ca.DER, chain); !errors.Is(err, keys.ENOKEY) {
		t.Errorf("chain, the CA into an empty keyring: %v", err)
	}
	// A forged signature is rejected.
	forged := append([]byte(nil), signed.DER...)
	forged[len(forged)-5] ^= 0x40
	if _, err := c.AddKey("asymmetric", "forged", forged, byKey); err == nil {
		t.Error("a certificate with a broken signature was linked")
	}

	for _, tc := range []struct {
		spec string
		err  error
	}{
		{"key_or_keyring", keys.EINVAL},
		{"key_or_keyring:", keys.EINVAL},
		{"key_or_keyring:x", keys.EINVAL},
		{"key_or_keyring:0", keys.ENOKEY},
		{"key_or_keyring:1:link", keys.EINVAL},
		{"key_or_keyring:99999", keys.ENOKEY},
		{"nonsense", keys.EINVAL},
	} {
		r := must(c.AddKey("keyring", "bad "+tc.spec, nil, keys.SessionKeyring))(t)
		typ := "asymmetric"
		if err := c.RestrictKeyring(r, &typ, &tc.spec); !errors.Is(err, tc.err) {
			t.Errorf("restriction %q: %v, want %v", tc.spec, err, tc.err)
		}
	}
	// A keyring trusting a keyring that trusts it back: EDEADLK.
	a := must(c.AddKey("keyring", "a", nil, keys.SessionKeyring))(t)
	b := restrict("b", "key_or_keyring:"+itoa(a))
	spec, typ := "key_or_keyring:"+itoa(b), "asymmetric"
	if err := c.RestrictKeyring(a, &typ, &spec); !errors.Is(err, keys.EDEADLK) {
		t.Errorf("restriction cycle: %v", err)
	}
}

func TestBuiltinTrusted(t *testing.T) {
	e := newEnv(t)
	c := e.caller(0, 0)
	ca := certtest.New(t, certtest.Options{CN: "Vendor CA", CA: true}, nil)
	signed := certtest.New(t, certtest.Options{CN: "module key", Serial: 5}, ca)
	self := certtest.New(t, certtest.Options{CN: "self"}, nil)
	if _, err := AddBuiltinTrusted(e.s, ca.PKCS8); !errors.Is(err, keys.EINVAL) {
		t.Errorf("a private key as a trusted certificate: %v", err)
	}
	must(AddBuiltinTrusted(e.s, ca.DER))(t)
	for _, spec := range []string{"builtin_trusted", "builtin_and_secondary_trusted"} {
		r := must(c.AddKey("keyring", spec, nil, keys.SessionKeyring))(t)
		typ := "asymmetric"
		must(0, c.RestrictKeyring(r, &typ, &spec))(t)
		if _, err := c.AddKey("asymmetric", "", signed.DER, r); err != nil {
			t.Errorf("%s: signed by a built-in key: %v", spec, err)
		}
		if _, err := c.AddKey("asymmetric", "", self.DER, r); !errors.Is(err, keys.ENOKEY) {
			t.Errorf("%s: self-signed: %v", spec, err)
		}
	}
	b := must(e.s.BuiltinTrustedKeyring())(t)
	d := must(c.Describe(b))(t)
	if d.Description != ".builtin_trusted_keys" || d.Perm != 0x1f0b0000 || d.UID != 0 {
		t.Errorf("builtin keyring: %+v", d)
	}
	// Nobody but a possessor may add to it, and nobody possesses it.
	if _, err := c.AddKey("asymmetric", "", self.DER, b); !errors.Is(err, keys.EACCES) {
		t.Errorf("add to the builtin keyring: %v", err)
	}
	sec := must(e.s.SecondaryTrustedKeyring())(t)
	if d := must(c.Describe(sec))(t); d.Perm != 0x1f0f0000 {
		t.Errorf("secondary keyring perm %08x", uint32(d.Perm))
	}
	// Root may add to the secondary keyring what a built-in key signed.
	if _, err := c.AddKey("asymmetric", "", signed.DER, sec); err != nil {
		t.Errorf("add a signed certificate to the secondary keyring: %v", err)
	}
	if _, err := c.AddKey("asymmetric", "", self.DER, sec); !errors.Is(err, keys.ENOKEY) {
		t.Errorf("add a self-signed one: %v", err)
	}
}

// TestRestrictionJudgesAnUpdate: add_key into a restricted keyring is
// judged by the restriction before it looks for a key to update or
// charges the caller for a new one, as the kernel's key_create_or_update
// does; keyctl_update links nothing and is not judged.
func TestRestrictionJudgesAnUpdate(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	ca := certtest.New(t, certtest.Options{CN: "CA", CA: true}, nil)
	caID := must(c.AddKey("asymmetric", "", ca.DER, keys.SessionKeyring))(t)
	var rejecting keys.Serial
	for _, tc := range []struct {
		name      string
		typ, spec *string
		err       error
	}{
		{"refusing every link", nil, nil, keys.EPERM},
		{"key_or_keyring", ptr("asymmetric"), ptr("key_or_keyring:" + itoa(caID)), keys.EOPNOTSUPP},
	} {
		ring := must(c.AddKey("keyring", tc.name, nil, keys.SessionKeyring))(t)
		a := must(c.AddKey("user", "a", []byte("v1"), ring))(t)
		must(0, c.RestrictKeyring(ring, tc.typ, tc.spec))(t)
		if tc.typ == nil {
			rejecting = ring
		}
		if id, err := c.AddKey("user", "a", []byte("v2"), ring); !errors.Is(err, tc.err) {
			t.Errorf("%s: add_key updating a linked key: %d, %v; want %v", tc.name, id, err, tc.err)
		}
		if got := must(c.Read(a))(t); string(got) != "v1" {
			t.Errorf("%s: the key reads %q after a refused add_key", tc.name, got)
		}
		must(0, c.Update(a, []byte("v3")))(t)
		if got := must(c.Read(a))(t); string(got) != "v3" {
			t.Errorf("%s: the key reads %q after keyctl_update", tc.name, got)
		}
	}
	// With the caller's key quota used up, the restriction still answers
	// first: the kernel judges the key before it allocates one.
	for i := 0; ; i++ {
		if _, err := c.AddKey("user", "fill"+itoa(keys.Serial(i)), []byte("x"), keys.SessionKeyring); err != nil {
			if !errors.Is(err, keys.EDQUOT) {
				t.Fatalf("filling the quota: %v", err)
			}
			break
		}
	}
	if _, err := c.AddKey("user", "b", []byte("x"), rejecting); !errors.Is(err, keys.EPERM) {
		t.Errorf("add_key into a keyring refusing every link, quota full: %v, want EPERM", err)
	}
}
