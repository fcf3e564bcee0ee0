package keys

import (
	"strings"
	"testing"
)

// Check passes on a service that operations have kept consistent, and
// names the invariant when one is broken behind the operations' back.
func TestCheckFindsBrokenInvariants(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 100)
	ring := must(c.AddKey("keyring", "r", nil, SessionKeyring))(t)
	inner := must(c.AddKey("keyring", "inner", nil, ring))(t)
	must(c.AddKey("user", "a", []byte("secret"), inner))(t)
	must(c.AddKey("logon", "svc:b", []byte("secret"), ring))(t)
	e.settle()
	if err := e.s.Check(); err != nil {
		t.Fatalf("consistent service: %v", err)
	}

	// A quota record off by one byte.
	u := e.s.quotaFor(1000)
	u.mu.Lock()
	u.qnbyte++
	u.mu.Unlock()
	if err := e.s.Check(); err == nil || !strings.Contains(err.Error(), "quota record") {
		t.Fatalf("quota off by one: %v", err)
	}
	u.mu.Lock()
	u.qnbyte--
	u.mu.Unlock()
	e.s.quotaPut(u)
	if err := e.s.Check(); err != nil {
		t.Fatalf("repaired quota: %v", err)
	}

	// A cycle, made without the link operation's check.
	ik, rk := e.s.lookup(inner), e.s.lookup(ring)
	snap := ik.loadRing()
	saved := snap.nested
	snap.nested = append(append([]link(nil), saved...), link{key: rk})
	err := e.s.Check()
	snap.nested = saved
	if err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("cycle: %v", err)
	}
	if err := e.s.Check(); err != nil {
		t.Fatalf("cycle removed: %v", err)
	}
}

func TestUninstantiatedListsKeysUnderConstruction(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 100)
	must(c.AddKey("user", "done", []byte("x"), SessionKeyring))(t)
	if got := e.s.Uninstantiated(); len(got) != 0 {
		t.Fatalf("no construction yet: %v", got)
	}
	k, err := e.s.alloc(keySpec{typ: userType, desc: "pending", uid: 1000, gid: 100, perm: PermDefault})
	if err != nil {
		t.Fatal(err)
	}
	defer k.put()
	if got := e.s.Uninstantiated(); len(got) != 1 || got[0] != k.serial {
		t.Fatalf("Uninstantiated = %v, want [%d]", got, k.serial)
	}
}
