package keys

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// Races between two users' requests, each found by an audit.

// Two keyrings restricted by each other at once: the kernel serialises
// restrictions (keyring_serialise_restrict_sem), so that one of the two
// finds the other's restriction and fails with EDEADLK. Each once checked
// under its own keyring's lock only, and both were accepted within a few
// hundred tries (of the 3,000 here): the loop they made had any later
// restriction naming them walk it for ever, holding its keyring's lock,
// which stalled the collector for every user.
func TestConcurrentRestrictionsMakeNoLoop(t *testing.T) {
	e := newEnv(t)
	tun := e.s.Tunables()
	tun.MaxKeys, tun.MaxBytes = 100000, 10000000
	noErr(t, e.s.SetTunables(tun))
	c := e.caller(1000, 1000)
	typ := "asymmetric"
	for i := range 3000 {
		a := must(c.AddKey("keyring", "a"+itoa(Serial(i)), nil, SessionKeyring))(t)
		b := must(c.AddKey("keyring", "b"+itoa(Serial(i)), nil, SessionKeyring))(t)
		sa, sb := "key_or_keyring:"+itoa(b), "key_or_keyring:"+itoa(a)
		var ea, eb error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() { <-start; ea = c.RestrictKeyring(a, &typ, &sa) })
		wg.Go(func() { <-start; eb = c.RestrictKeyring(b, &typ, &sb) })
		close(start)
		wg.Wait()
		if (ea == nil) == (eb == nil) || !errors.Is(errors.Join(ea, eb), EDEADLK) {
			t.Fatalf("try %d: restricting two keyrings by each other at once: %v and %v; want one to fail with EDEADLK", i, ea, eb)
		}
		noErr(t, c.Unlink(a, SessionKeyring))
		noErr(t, c.Unlink(b, SessionKeyring))
	}
}

// The collector decides that a key is dead when its scan meets the key,
// and prunes its links later (at the end of the chunk, or after the scan
// for a large keyring). add_key updates an expired key, which clears its
// expiry: a key so revived in between was once unlinked all the same,
// and destroyed, after its update had returned (1 to 4 times in 2,000
// tries). Each link is now checked again under the keyring's lock, as
// the kernel's keyring_gc does; here the prune is handed a decision made
// before the update.
func TestCollectorKeepsAKeyRevivedBeforeItsPrune(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	ring := must(c.AddKey("keyring", "r", nil, SessionKeyring))(t)
	k := must(c.AddKey("user", "victim", []byte("v1"), ring))(t)
	noErr(t, c.SetTimeout(k, 1))
	rk, kk := e.s.lookup(ring), e.s.lookup(k)
	e.clock.advance(2 * time.Second)
	if _, dead := e.s.gcol.dead(kk, e.clock.now().UnixNano(), 0); !dead {
		t.Fatal("the expired key is not due for pruning")
	}
	if id := must(c.AddKey("user", "victim", []byte("v2"), ring))(t); id != k {
		t.Fatalf("add_key made key %d rather than update the expired %d", id, k)
	}
	e.settle()
	var pruned [reapReasons]uint64
	e.s.pruneFrom(rk, []deadKey{{k: kk, why: ReapExpired}}, &pruned, freshNodes{})
	if !slices.Contains(serials(must(c.Read(ring))(t)), k) {
		t.Fatal("the collector unlinked a key updated after its scan")
	}
	if got := must(c.Read(k))(t); string(got) != "v2" {
		t.Fatalf("the updated key reads %q", got)
	}
}

// An encrypted key makes its new payload from the one it replaces; a
// negative key has none, and its update (keyctl update, or add_key
// finding it) was taken for a new key's command, making a payload where
// the kernel's encrypted_update answers ENOKEY.
func TestUpdateOfANegativeEncryptedKey(t *testing.T) {
	e := newEnv(t, WithUpcall(UpcallFunc(func(_ context.Context, u *Upcall) error {
		if _, err := u.Helper.AssumeAuthority(u.Key); err != nil {
			return err
		}
		return u.Helper.Negate(u.Key, 30, 0)
	})))
	c := e.caller(1000, 1000)
	m := must(c.AddKey("user", "m", bytes.Repeat([]byte("k"), 32), SessionKeyring))(t) // a master key a new command would use
	if _, err := c.RequestKey("encrypted", "neg", []byte("info"), SessionKeyring); !errors.Is(err, ENOKEY) {
		t.Fatalf("request_key negated by its helper: %v", err)
	}
	var neg Serial
	for _, id := range serials(must(c.Read(SessionKeyring))(t)) {
		if id != m {
			neg = id
		}
	}
	if neg == 0 {
		t.Fatal("the negative key is not in the session keyring")
	}
	if err := c.Update(neg, []byte("new user:m 32")); !errors.Is(err, ENOKEY) {
		t.Errorf("keyctl update of a negative encrypted key: %v, want ENOKEY", err)
	}
	if _, err := c.AddKey("encrypted", "neg", []byte("new user:m 32"), SessionKeyring); !errors.Is(err, ENOKEY) {
		t.Errorf("add_key onto a negative encrypted key: %v, want ENOKEY", err)
	}
}
