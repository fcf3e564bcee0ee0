package keys

import (
	"errors"
	"testing"

	"github.com/ukeys/ukeys/internal/certtest"
)

// Every bit KEYCTL_CAPABILITIES sets names a feature that works, and
// every bit it leaves clear names one that does not: a program that
// trusts `keyctl supports` gets what it was promised.
func TestCapabilitiesMatchFeatures(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	checkCapabilities(t, c)
	// Without the asymmetric and big_key types, as a kernel built
	// without them, their bits are clear and their calls fail.
	for _, name := range []string{"asymmetric", "big_key"} {
		if err := e.s.UnregisterType(name); err != nil {
			t.Fatalf("unregister %s: %v", name, err)
		}
	}
	if caps := checkCapabilities(t, c); caps[0]&(CapPublicKey|CapBigKey) != 0 {
		t.Errorf("public key or big_key advertised without their types: %08b", caps[0])
	}
}

// checkCapabilities tries every feature KEYCTL_CAPABILITIES names for
// c, and returns what it advertised.
func checkCapabilities(t *testing.T, c *Caller) []byte {
	t.Helper()
	caps := c.Capabilities()
	if len(caps) != 2 {
		t.Fatalf("%d bytes, want the kernel's 2", len(caps))
	}
	ring := must(c.AddKey("keyring", "caps", nil, SessionKeyring))(t)
	key := must(c.AddKey("user", "k", []byte("x"), ring))(t)
	restricted := "restricted"
	for _, f := range []struct {
		name string
		byte int
		bit  byte
		try  func() error
	}{
		{"capabilities", 0, CapCapabilities, func() error { return nil }},
		{"persistent keyrings", 0, CapPersistent, func() error {
			_, err := c.GetPersistent(-1, ring)
			return err
		}},
		{"dh_compute", 0, CapDH, func() error {
			// 2^3 mod 23, the prime padded to the kernel's least size.
			priv := must(c.AddKey("user", "priv", []byte{3}, ring))(t)
			prime := must(c.AddKey("user", "prime", padded(23, 192), ring))(t)
			base := must(c.AddKey("user", "base", []byte{2}, ring))(t)
			_, out, err := c.DHCompute(DHParams{Private: priv, Prime: prime, Base: base}, 256, nil)
			if err == nil && (len(out) == 0 || out[len(out)-1] != 8) {
				return errors.New("wrong result")
			}
			return err
		}},
		{"public keys", 0, CapPublicKey, func() error {
			ca := certtest.New(t, certtest.Options{CN: "caps"}, nil)
			id, err := c.AddKey("asymmetric", "", ca.DER, ring)
			if err != nil {
				return err
			}
			_, err = c.PkeyQuery(id, "enc=pkcs1")
			return err
		}},
		{"big_key", 0, CapBigKey, func() error {
			_, err := c.AddKey("big_key", "big", make([]byte, 10000), ring)
			return err
		}},
		{"invalidate", 0, CapInvalidate, func() error { return c.Invalidate(key) }},
		{"restrict_keyring", 0, CapRestrict, func() error {
			r := must(c.AddKey("keyring", restricted, nil, ring))(t)
			return c.RestrictKeyring(r, nil, nil)
		}},
		{"move", 0, CapMove, func() error {
			k := must(c.AddKey("user", "m", []byte("x"), ring))(t)
			return c.Move(k, ring, SessionKeyring, 0)
		}},
		{"notifications", 1, Cap2Notifications, func() error {
			q := NewWatchQueue(4)
			defer q.Close()
			return c.WatchKey(ring, q, 1)
		}},
	} {
		advertised := caps[f.byte]&f.bit != 0
		err := f.try()
		if advertised && err != nil {
			t.Errorf("%s: advertised, but %v", f.name, err)
		}
		if !advertised && err == nil {
			t.Errorf("%s: works, but not advertised", f.name)
		}
	}
	// Keyring names and key tags per namespace are the kernel's: ukeys
	// has one namespace per daemon, and says so.
	if caps[1]&(Cap2NSKeyringName|Cap2NSKeyTag) != 0 {
		t.Errorf("namespace bits set: %08b", caps[1])
	}
	return caps
}
