package keys

import "testing"

// The calls a daemon bounds as expensive are told apart without
// creating anything: an asymmetric add, instantiate or update; a link
// into a keyring restricted by a check (not one that refuses every
// link), named by serial or by a special id.
func TestCostlyCalls(t *testing.T) {
	e := newEnv(t)
	c := e.s.NewCaller(Cred{UID: 1000, GID: 100, PID: 2000})
	defer c.Release()
	if !e.s.CostlyType("asymmetric") || e.s.CostlyType("user") || e.s.CostlyType("nonesuch") {
		t.Fatal("CostlyType: only asymmetric is costly")
	}
	// Nothing is made to answer: the caller has no session yet.
	if c.CostlyRing(SessionKeyring) || c.CostlyRing(UserKeyring) || c.CostlyRing(ThreadKeyring) || c.Session() != nil {
		t.Fatal("CostlyRing of keyrings that do not exist: costly, or made one")
	}
	if e.s.existingUserKeyring(1000, false) != nil {
		t.Fatal("CostlyRing made the user keyring")
	}
	must(c.JoinSessionKeyring(nil))(t)
	plain := must(c.AddKey("keyring", "plain", nil, SessionKeyring))(t)
	none := must(c.AddKey("keyring", "none", nil, SessionKeyring))(t)
	checked := must(c.AddKey("keyring", "checked", nil, SessionKeyring))(t)
	user := must(c.AddKey("user", "u", []byte("v"), SessionKeyring))(t)
	noErr(t, c.RestrictKeyring(none, nil, nil))
	typ, spec := "asymmetric", "key_or_keyring:"+itoa(user)
	noErr(t, c.RestrictKeyring(checked, &typ, &spec))
	if c.CostlyRing(plain) || c.CostlyRing(none) || !c.CostlyRing(checked) {
		t.Fatal("CostlyRing: only a keyring restricted by a check is costly")
	}
	if c.CostlyKey(user) || c.CostlyKey(plain) || c.CostlyKey(-3) || c.CostlyKey(12345) {
		t.Fatal("CostlyKey of keys that are not asymmetric")
	}
	// A special id: the user keyring, restricted by a check.
	u := must(c.GetKeyringID(UserKeyring, true))(t)
	if c.CostlyRing(UserKeyring) {
		t.Fatal("an unrestricted user keyring is costly")
	}
	noErr(t, c.RestrictKeyring(u, &typ, &spec))
	if !c.CostlyRing(UserKeyring) {
		t.Fatal("a user keyring restricted by a check is not costly by its special id")
	}
}
