package keys

import (
	"errors"
	"fmt"
	"testing"
)

// TestPermissionMatrix grants exactly one right in exactly one class and
// checks every kind of caller against every operation that needs a right:
// the kernel's key_task_permission as a table. Callers:
//
//	possessor: uid 1003, reaches the key through its session keyring
//	owner:     uid 1000 (the key's owner), not possessing it
//	group:     uid 1001, a member of the key's group 100
//	other:     uid 1002
//	root:      uid 0, not possessing it (no bypass of the bits)
func TestPermissionMatrix(t *testing.T) {
	type class struct {
		name  string
		shift uint
	}
	classes := []class{{"possessor", PossessorShift}, {"user", UserShift}, {"group", GroupShift}, {"other", OtherShift}}
	rights := []struct {
		name  string
		right Perm
		op    func(c *Caller, id Serial) error
	}{
		{"view", View, func(c *Caller, id Serial) error { _, err := c.Describe(id); return err }},
		{"read", Read, func(c *Caller, id Serial) error { _, err := c.Read(id); return err }},
		{"write", Write, func(c *Caller, id Serial) error { return c.Update(id, []byte("new")) }},
		{"search", Search, func(c *Caller, id Serial) error { _, err := c.GetKeyringID(id, false); return err }},
		{"link", Link, func(c *Caller, id Serial) error { return c.Link(id, SessionKeyring) }},
		{"setattr", SetAttr, func(c *Caller, id Serial) error { return c.SetTimeout(id, 0) }},
	}
	e := newEnv(t)
	owner := e.caller(1000, 100)
	callers := []struct {
		name string
		c    *Caller
		// the class byte that applies to this caller (possession adds the
		// possessor byte)
		gets map[string]bool
	}{
		{"possessor", e.caller(1003, 300), map[string]bool{"other": true}},
		{"owner", e.caller(1000, 100), map[string]bool{"user": true}},
		{"group", e.caller(1001, 200, 100), map[string]bool{"group": true}},
		{"other", e.caller(1002, 300), map[string]bool{"other": true}},
		{"root", e.caller(0, 0), map[string]bool{"other": true}},
	}
	possessor := callers[0].c
	n := 0
	for _, cl := range classes {
		for _, r := range rights {
			for _, who := range callers {
				name := fmt.Sprintf("%s-%s/%s", cl.name, r.name, who.name)
				t.Run(name, func(t *testing.T) {
					n++
					id := must(owner.AddKey("user", fmt.Sprintf("k%d", n), []byte("data"), SessionKeyring))(t)
					if err := owner.SetPerm(id, PermMask); err != nil {
						t.Fatal(err)
					}
					if err := possessor.Link(id, SessionKeyring); err != nil {
						t.Fatalf("making the possessor: %v", err)
					}
					if err := owner.SetPerm(id, r.right<<cl.shift); err != nil {
						t.Fatal(err)
					}
					err := r.op(who.c, id)
					// The caller's class byte: a group member falls back to
					// the other byte when the group byte is empty.
					mine := who.gets[cl.name]
					if who.name == "group" && cl.name == "other" {
						mine = true
					}
					// Possession itself needs the key to grant Search (with
					// possessor bits counted): a key the possessor may not
					// search is not possessed (checked against the kernel:
					// setperm 0x01000000 then describe fails with EACCES).
					possessed := who.name == "possessor" && r.right == Search &&
						(cl.name == "possessor" || cl.name == "other")
					allowed := mine || (possessed && cl.name == "possessor")
					// The kernel lets a possessor read without the read bit.
					if r.right == Read && possessed {
						allowed = true
					}
					switch {
					case allowed && err != nil:
						t.Fatalf("%s denied: %v", name, err)
					case !allowed && !errors.Is(err, EACCES):
						t.Fatalf("%s: got %v, want EACCES", name, err)
					}
				})
			}
		}
	}
}

// Privilege is a capability of the caller's credentials, as the kernel's
// capable() checks it: root without CAP_SYS_ADMIN may not chown or setperm
// another's key, nor without CAP_SETUID take another's persistent
// keyring; a non-root caller with them may. A caller whose capabilities
// are unknown is privileged if and only if it is root.
func TestPrivilegeIsCapabilities(t *testing.T) {
	e := newEnv(t)
	owner := e.caller(1000, 1000)
	k := must(owner.AddKey("user", "k", []byte("v"), SessionKeyring))(t)
	noErr(t, owner.SetPerm(k, PermDefault|OtherAll))
	as := func(uid uint32, caps uint64, known bool) *Caller {
		c := e.s.NewCaller(Cred{UID: uid, GID: uid, PID: int(5000 + uid), Caps: caps, CapsKnown: known})
		t.Cleanup(c.Release)
		return c
	}
	const all = 1<<41 - 1
	gid := int64(4000)
	for _, c := range []struct {
		name     string
		caller   *Caller
		sysadmin bool
		setuid   bool
	}{
		{"root with every capability", as(0, all, true), true, true},
		{"root without capabilities", as(0, 0, true), false, false},
		{"root, capabilities unknown", as(0, 0, false), true, true},
		{"a user with CAP_SYS_ADMIN", as(1001, 1<<CapSysAdmin, true), true, false},
		{"a user with CAP_SETUID", as(1002, 1<<CapSetUID, true), false, true},
		{"a user, capabilities unknown", as(1003, 0, false), false, false},
	} {
		gid++ // a group nobody is in, and not the key's
		err := c.caller.SetPerm(k, PermDefault|OtherAll)
		if (err == nil) != c.sysadmin {
			t.Errorf("%s: setperm of another's key: %v", c.name, err)
		}
		err = c.caller.Chown(k, -1, gid)
		if (err == nil) != c.sysadmin {
			t.Errorf("%s: chgrp of another's key: %v", c.name, err)
		}
		_, err = c.caller.GetPersistent(1000, SessionKeyring)
		if (err == nil) != c.setuid {
			t.Errorf("%s: another's persistent keyring: %v", c.name, err)
		}
		if err != nil && !errors.Is(err, EPERM) {
			t.Errorf("%s: %v, want EPERM", c.name, err)
		}
	}
}
