package keys

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestAddReadUpdateDescribe(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	id := must(c.AddKey("user", "greeting", []byte("hello"), SessionKeyring))(t)
	if id < 3 || id >= 1<<30 {
		t.Fatalf("serial %d outside [3, 2^30)", id)
	}
	if got := must(c.Read(id))(t); string(got) != "hello" {
		t.Fatalf("Read = %q", got)
	}
	// add_key on the same type and description updates in place.
	again := must(c.AddKey("user", "greeting", []byte("bonjour"), SessionKeyring))(t)
	if again != id {
		t.Fatalf("re-add returned %d, want the existing %d", again, id)
	}
	if got := must(c.Read(id))(t); string(got) != "bonjour" {
		t.Fatalf("Read after update = %q", got)
	}
	if err := c.Update(id, []byte("hej")); err != nil {
		t.Fatal(err)
	}
	d := must(c.Describe(id))(t)
	if got := d.String(); got != "user;1000;1000;3f010000;greeting" {
		t.Fatalf("Describe = %q", got)
	}
	if p := d.Perm.String(); p != "alswrv-----v------------" {
		t.Fatalf("perm string %q", p)
	}
}

func TestAddKeyErrors(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	uk := must(c.AddKey("user", "u", []byte("x"), SessionKeyring))(t)
	cases := []struct {
		name      string
		typ, desc string
		payload   []byte
		ring      Serial
		want      Errno
	}{
		{"unknown type", "nosuch", "d", []byte("x"), SessionKeyring, ENODEV},
		{"internal type", ".request_key_auth", "d", []byte("x"), SessionKeyring, EPERM},
		{"empty type", "", "d", []byte("x"), SessionKeyring, EINVAL},
		{"long type", strings.Repeat("t", 32), "d", []byte("x"), SessionKeyring, EINVAL},
		{"empty description", "user", "", []byte("x"), SessionKeyring, EINVAL},
		{"long description", "user", strings.Repeat("d", 4096), []byte("x"), SessionKeyring, EINVAL},
		{"dot keyring", "keyring", ".secret", nil, SessionKeyring, EPERM},
		{"empty user payload", "user", "d", nil, SessionKeyring, EINVAL},
		{"huge user payload", "user", "d", make([]byte, 32768), SessionKeyring, EINVAL},
		{"payload over 1MiB", "big_key", "d", make([]byte, 1<<20), SessionKeyring, EINVAL},
		{"keyring with payload", "keyring", "r", []byte("x"), SessionKeyring, EINVAL},
		{"logon without prefix", "logon", "noprefix", []byte("x"), SessionKeyring, EINVAL},
		{"logon empty prefix", "logon", ":x", []byte("x"), SessionKeyring, EINVAL},
		{"destination not a keyring", "user", "d", []byte("x"), uk, ENOTDIR},
		{"no such destination", "user", "d", []byte("x"), 12345, ENOKEY},
		{"group keyring", "user", "d", []byte("x"), GroupKeyring, EINVAL},
		{"zero destination", "user", "d", []byte("x"), 0, EINVAL},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.AddKey(tc.typ, tc.desc, tc.payload, tc.ring)
			wantErr(t, "AddKey", err, tc.want)
		})
	}
}

func TestLogonAndBigKey(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	lk := must(c.AddKey("logon", "svc:pw", []byte("secret"), SessionKeyring))(t)
	_, err := c.Read(lk)
	wantErr(t, "Read logon", err, EOPNOTSUPP)
	if d := must(c.Describe(lk))(t); d.Perm != PermLogon {
		t.Fatalf("logon perm %08x", uint32(d.Perm))
	}
	small := must(c.AddKey("big_key", "small", []byte("tiny"), SessionKeyring))(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640 KB, sealed in a file
	bk := must(c.AddKey("big_key", "big", big, SessionKeyring))(t)
	if got := must(c.Read(bk))(t); !bytes.Equal(got, big) {
		t.Fatal("big_key payload read back differs")
	}
	if got := must(c.Read(small))(t); string(got) != "tiny" {
		t.Fatalf("small big_key = %q", got)
	}
	proc := c.ProcKeys()
	if !strings.Contains(proc, "big_key   big: 640000 [file]") || !strings.Contains(proc, "big_key   small: 4 [buff]") {
		t.Fatalf("/proc/keys lacks big_key lines:\n%s", proc)
	}
}

func TestPermissionClasses(t *testing.T) {
	e := newEnv(t)
	owner := e.caller(1000, 100)
	member := e.caller(1001, 200, 100)
	other := e.caller(1002, 300)
	root := e.caller(0, 0)
	id := must(owner.AddKey("user", "shared", []byte("data"), SessionKeyring))(t)
	// Others do not possess it: default perms give them nothing.
	for _, c := range []*Caller{member, other, root} {
		_, err := c.Read(id)
		wantErr(t, "Read by non-possessor", err, EACCES)
		_, err = c.Describe(id)
		wantErr(t, "Describe by non-possessor", err, EACCES)
	}
	// Owner without possession gets only the user byte (view).
	owner2 := e.caller(1000, 100)
	if _, err := owner2.Describe(id); err != nil {
		t.Fatalf("owner (user view) Describe: %v", err)
	}
	_, err := owner2.Read(id)
	wantErr(t, "owner Read without possession", err, EACCES)
	// Group read for group members only.
	if err := owner.SetPerm(id, PossAll|View<<UserShift|(View|Read)<<GroupShift); err != nil {
		t.Fatal(err)
	}
	if got := must(member.Read(id))(t); string(got) != "data" {
		t.Fatalf("member read %q", got)
	}
	_, err = other.Read(id)
	wantErr(t, "other Read", err, EACCES)
	// The owner class gets the user byte only, even if the group byte has
	// more: no fallback.
	_, err = owner2.Read(id)
	wantErr(t, "owner Read with group read set", err, EACCES)
	// SetPerm: owner or root only; bad bits rejected.
	wantErr(t, "member SetPerm", member.SetPerm(id, 0), EACCES)
	wantErr(t, "bad bits", owner.SetPerm(id, 0x40000000), EINVAL)
	// Chown: giving a key away needs privilege.
	wantErr(t, "owner chown to other", owner.Chown(id, 1002, -1), EACCES)
	if err := owner.Chown(id, -1, 100); err != nil {
		t.Fatalf("chgrp to own group: %v", err)
	}
	wantErr(t, "chgrp to foreign group", owner.Chown(id, -1, 999), EACCES)
	// Root may chown, given SetAttr: possess it first.
	if err := owner.SetPerm(id, PossAll|(View|SetAttr)<<UserShift|OtherAll); err != nil {
		t.Fatal(err)
	}
	if err := root.Chown(id, 1002, -1); err != nil {
		t.Fatalf("root chown: %v", err)
	}
	if d := must(root.Describe(id))(t); d.UID != 1002 {
		t.Fatalf("uid after chown %d", d.UID)
	}
}

func TestRevokeInvalidateTimeout(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	id := must(c.AddKey("user", "r", []byte("x"), SessionKeyring))(t)
	if err := c.Revoke(id); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(id)
	wantErr(t, "Read revoked", err, EKEYREVOKED)
	wantErr(t, "Update revoked", c.Update(id, []byte("y")), EKEYREVOKED)
	_, err = c.Search(SessionKeyring, "user", "r", 0)
	wantErr(t, "Search revoked", err, EKEYREVOKED)

	ex := must(c.AddKey("user", "e", []byte("x"), SessionKeyring))(t)
	if err := c.SetTimeout(ex, 10); err != nil {
		t.Fatal(err)
	}
	must(c.Read(ex))(t)
	e.clock.advance(11e9)
	_, err = c.Read(ex)
	wantErr(t, "Read expired", err, EKEYEXPIRED)
	_, err = c.Search(SessionKeyring, "user", "e", 0)
	wantErr(t, "Search expired", err, EKEYEXPIRED)

	iv := must(c.AddKey("user", "i", []byte("x"), SessionKeyring))(t)
	if err := c.Invalidate(iv); err != nil {
		t.Fatal(err)
	}
	_, err = c.Read(iv)
	wantErr(t, "Read invalidated", err, ENOKEY)
	_, err = c.Search(SessionKeyring, "user", "nosuch", 0)
	wantErr(t, "Search missing", err, ENOKEY)
}

func TestKeyringLinks(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	a := must(c.AddKey("keyring", "a", nil, SessionKeyring))(t)
	b := must(c.AddKey("keyring", "b", nil, a))(t)
	wantErr(t, "link a into b (cycle)", c.Link(a, b), EDEADLK)
	wantErr(t, "link a into itself", c.Link(a, a), EDEADLK)
	k := must(c.AddKey("user", "k", []byte("x"), b))(t)
	if err := c.Link(k, a); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "link into a user key", c.Link(k, k), ENOTDIR)
	if err := c.Unlink(k, a); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "unlink twice", c.Unlink(k, a), ENOENT)
	// Search finds the key two levels down.
	if got := must(c.Search(SessionKeyring, "user", "k", 0))(t); got != k {
		t.Fatalf("Search found %d, want %d", got, k)
	}
	// Move with and without the exclusive flag.
	k2 := must(c.AddKey("user", "k", []byte("y"), a))(t)
	wantErr(t, "exclusive move onto an existing name", c.Move(k2, a, b, MoveExcl), EEXIST)
	if err := c.Move(k2, a, b, 0); err != nil {
		t.Fatal(err)
	}
	ids := serials(must(c.Read(b))(t))
	if len(ids) != 1 || ids[0] != k2 {
		t.Fatalf("b holds %v after the move, want only %d", ids, k2)
	}
	// Depth, as the kernel measured here: a keyring with 6 levels of
	// keyrings below it may be linked, one with 7 may not.
	top := must(c.AddKey("keyring", "top", nil, SessionKeyring))(t)
	var chain []Serial
	for i := range 8 {
		chain = append(chain, must(c.AddKey("keyring", "n"+string(rune('0'+i)), nil, SessionKeyring))(t))
	}
	for i := len(chain) - 1; i > 0; i-- {
		if err := c.Link(chain[i], chain[i-1]); err != nil {
			t.Fatalf("building chain at %d: %v", i, err)
		}
	}
	if err := c.Link(chain[1], top); err != nil {
		t.Fatalf("link a keyring with 6 levels below: %v", err)
	}
	wantErr(t, "link a keyring with 7 levels below", c.Link(chain[0], top), ELOOP)
	// Clear empties a keyring.
	if err := c.Clear(a); err != nil {
		t.Fatal(err)
	}
	if got := must(c.Read(a))(t); len(got) != 0 {
		t.Fatalf("a not empty after Clear: %v", serials(got))
	}
}

func serials(b []byte) []Serial {
	var out []Serial
	for i := 0; i+4 <= len(b); i += 4 {
		out = append(out, Serial(uint32(b[i])|uint32(b[i+1])<<8|uint32(b[i+2])<<16|uint32(b[i+3])<<24))
	}
	return out
}

func TestListingOrderMatchesKernel(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	r := must(c.AddKey("keyring", "order", nil, SessionKeyring))(t)
	var ks []Serial
	for _, d := range []string{"k1", "k2", "k3", "k4"} {
		ks = append(ks, must(c.AddKey("user", d, []byte("x"), r))(t))
	}
	got := serials(must(c.Read(r))(t))
	want := []Serial{ks[0], ks[3], ks[2], ks[1]}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("listing %v, want %v (first, then newest to oldest)", got, want)
		}
	}
}

func TestQuota(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	must(c.GetKeyringID(UserKeyring, false))(t) // _uid.N and _uid_ses.N are charged too
	keys0, bytes0 := e.s.QuotaUsage(1000)
	id := must(c.AddKey("user", "q", []byte("12345"), SessionKeyring))(t)
	keys1, bytes1 := e.s.QuotaUsage(1000)
	// One key; description + 1 + payload + a 4-byte link in the session keyring.
	if keys1-keys0 != 1 || bytes1-bytes0 != len("q")+1+5+4 {
		t.Fatalf("quota went from %d/%d to %d/%d", keys0, bytes0, keys1, bytes1)
	}
	if err := c.Unlink(id, SessionKeyring); err != nil {
		t.Fatal(err)
	}
	e.settle()
	if k, b := e.s.QuotaUsage(1000); k != keys0 || b != bytes0 {
		t.Fatalf("quota after destruction %d/%d, want %d/%d", k, b, keys0, bytes0)
	}
	// The key count limit.
	tun := e.s.Tunables()
	tun.MaxKeys = keys0 + 2
	if err := e.s.SetTunables(tun); err != nil {
		t.Fatal(err)
	}
	must(c.AddKey("user", "a", []byte("x"), SessionKeyring))(t)
	must(c.AddKey("user", "b", []byte("x"), SessionKeyring))(t)
	_, err := c.AddKey("user", "c", []byte("x"), SessionKeyring)
	wantErr(t, "AddKey over maxkeys", err, EDQUOT)
	tun.MaxKeys = 0
	wantErr(t, "maxkeys 0", e.s.SetTunables(tun), EINVAL)
}

func TestSpecialKeyrings(t *testing.T) {
	e := newEnv(t)
	c := e.s.NewCaller(Cred{UID: 1000, GID: 1000, PID: 42})
	defer c.Release()
	_, err := c.GetKeyringID(ThreadKeyring, false)
	wantErr(t, "thread keyring without create", err, ENOKEY)
	tid := must(c.GetKeyringID(ThreadKeyring, true))(t)
	if d := must(c.Describe(tid))(t); d.Description != "_tid" || d.Perm != PermThreadProcess {
		t.Fatalf("thread keyring %+v", d)
	}
	// No session: @s is the user-session keyring.
	s := must(c.GetKeyringID(SessionKeyring, false))(t)
	if d := must(c.Describe(s))(t); d.Description != "_uid_ses.1000" || d.GID != OverflowID || d.Perm != PermUserKeyring {
		t.Fatalf("session fallback %+v", d)
	}
	u := must(c.GetKeyringID(UserKeyring, false))(t)
	if d := must(c.Describe(u))(t); d.Description != "_uid.1000" {
		t.Fatalf("user keyring %+v", d)
	}
	// The user-session keyring links the user keyring.
	if ids := serials(must(c.Read(s))(t)); len(ids) != 1 || ids[0] != u {
		t.Fatalf("_uid_ses holds %v, want [%d]", ids, u)
	}
	// With create, a user-session session is replaced by a fresh _ses.
	ns := must(c.GetKeyringID(SessionKeyring, true))(t)
	if d := must(c.Describe(ns))(t); ns == s || d.Description != "_ses" || d.Perm != PermSessionAnon {
		t.Fatalf("created session %d %+v", ns, d)
	}
	_, err = c.GetKeyringID(GroupKeyring, true)
	wantErr(t, "group keyring", err, EINVAL)
	_, err = c.GetKeyringID(ReqKeyAuthKey, false)
	wantErr(t, "auth key without authority", err, ENOKEY)
	// Named sessions: a second join of the same name makes another keyring,
	// since the named keyring's perms do not let its owner search it.
	name := "fish"
	a := must(c.JoinSessionKeyring(&name))(t)
	b := must(c.JoinSessionKeyring(&name))(t)
	if a == b || a == 0 {
		t.Fatalf("joins of %q gave %d and %d", name, a, b)
	}
	dot := ".x"
	_, err = c.JoinSessionKeyring(&dot)
	wantErr(t, "dot session", err, EPERM)
}

func TestProcKeysFormat(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	id := must(c.AddKey("user", "foo", []byte("bar"), SessionKeyring))(t)
	line := ""
	for _, l := range strings.Split(c.ProcKeys(), "\n") {
		if strings.HasSuffix(l, "foo: 3") {
			line = l
		}
	}
	want := hex8(id) + " I--Q---     1 perm 3f010000  1000  1000 user      foo: 3"
	if line != want {
		t.Fatalf("/proc/keys line\n got %q\nwant %q", line, want)
	}
	if err := c.SetTimeout(id, 90); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.ProcKeys(), " I--Q---     1   1m 3f010000") {
		t.Fatalf("timeout column:\n%s", c.ProcKeys())
	}
	users := e.s.ProcKeyUsers()
	if !strings.Contains(users, " 1000: ") {
		t.Fatalf("/proc/key-users lacks uid 1000:\n%s", users)
	}
}

func hex8(id Serial) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 8)
	v := uint32(id)
	for i := 7; i >= 0; i-- {
		b[i] = digits[v&15]
		v >>= 4
	}
	return string(b)
}

// Joining a session by name joins the oldest keyring of that name that
// the caller may search without possessing it, made as a session or not
// (the kernel's find_keyring_by_name); only when there is none is a new
// one made. A destroyed keyring is no longer found.
func TestJoinSessionByName(t *testing.T) {
	e := newEnv(t)
	alice := e.caller(1000, 1000)
	bob := e.caller(1001, 1001)
	name := "shared"
	// Alice's keyring grants its owner search: she may join it, though
	// it was never a session; bob, neither owner nor possessor, may not.
	ring := must(alice.AddKey("keyring", name, nil, SessionKeyring))(t)
	noErr(t, alice.SetPerm(ring, PossAll|UserAll))
	inner := must(alice.AddKey("user", "in", []byte("v"), ring))(t)
	other := e.caller(1000, 1000)
	if got := must(other.JoinSessionKeyring(&name))(t); got != ring {
		t.Fatalf("joined %d, want the existing keyring %d", got, ring)
	}
	if b := must(other.Read(inner))(t); string(b) != "v" {
		t.Fatalf("read %q", b)
	}
	// Joining it again changes nothing and says so with 0.
	if got := must(other.JoinSessionKeyring(&name))(t); got != 0 {
		t.Fatalf("joining the session it has: %d, want 0", got)
	}
	bobs := must(bob.JoinSessionKeyring(&name))(t)
	if bobs == ring {
		t.Fatal("bob joined a keyring he may not search")
	}
	// Now two keyrings are named so: a third caller who may search both
	// (root, with other search granted on bob's) gets the oldest.
	noErr(t, bob.SetPerm(bobs, PossAll|UserAll|OtherAll))
	noErr(t, alice.SetPerm(ring, PossAll|UserAll|OtherAll))
	carol := e.caller(1002, 1002)
	if got := must(carol.JoinSessionKeyring(&name))(t); got != ring {
		t.Fatalf("carol joined %d, want the oldest, %d", got, ring)
	}
	// Once alice's keyring is gone, the name finds bob's.
	noErr(t, alice.Invalidate(ring))
	other.Release()
	carol.Release()
	alice.Release()
	e.settle()
	dave := e.caller(1003, 1003)
	if got := must(dave.JoinSessionKeyring(&name))(t); got != bobs {
		t.Fatalf("dave joined %d, want bob's %d", got, bobs)
	}
	e.settle()
	noErr(t, e.s.Check())
}

// A child inherits its parent's session keyring and request_key default
// (the kernel copies both with the credentials at fork), whatever its
// own uid; a parent that only falls back to its user-session keyring
// passes nothing on, and the child falls back to its own user's.
func TestInherit(t *testing.T) {
	e := newEnv(t)
	parent := e.caller(1000, 1000)
	k := must(parent.AddKey("user", "s", []byte("v"), SessionKeyring))(t)
	must(parent.SetReqKeyKeyring(ReqKeyUser))(t)
	child := e.s.NewCaller(Cred{UID: 65534, GID: 65534, PID: 7001})
	t.Cleanup(child.Release)
	if !child.Inherit(parent) {
		t.Fatal("no session inherited")
	}
	if child.Session() != parent.Session() {
		t.Fatal("a different session")
	}
	if b := must(child.Read(k))(t); string(b) != "v" {
		t.Fatalf("the child read %q", b)
	}
	if prev := must(child.SetReqKeyKeyring(ReqKeyNoChange))(t); prev != ReqKeyUser {
		t.Fatalf("request_key default %d, want the parent's", prev)
	}
	// A parent without a session of its own.
	lone := e.s.NewCaller(Cred{UID: 1001, GID: 1001, PID: 7002})
	t.Cleanup(lone.Release)
	must(lone.GetKeyringID(SessionKeyring, false))(t) // falls back to _uid_ses.1001
	orphan := e.s.NewCaller(Cred{UID: 1002, GID: 1002, PID: 7003})
	t.Cleanup(orphan.Release)
	if orphan.Inherit(lone) {
		t.Fatal("inherited another user's user-session keyring")
	}
	ses := must(orphan.Describe(SessionKeyring))(t)
	if ses.Description != "_uid_ses.1002" {
		t.Fatalf("the child's session is %q", ses.Description)
	}
}

// A process's threads each have a thread keyring of their own; they
// share the process keyring that existed when they were made, and one a
// thread makes later is its own, as the kernel installs it in the making
// thread's credentials only.
func TestThreadsAndTheProcessKeyring(t *testing.T) {
	e := newEnv(t)
	main := e.caller(1000, 1000)
	pMain := must(main.GetKeyringID(ProcessKeyring, true))(t)
	other := main.NewThread()
	defer other.Release()
	if p := must(other.GetKeyringID(ProcessKeyring, false))(t); p != pMain {
		t.Fatalf("@p: %d and %d, want the one made before the thread", pMain, p)
	}
	tMain := must(main.GetKeyringID(ThreadKeyring, true))(t)
	if _, err := other.GetKeyringID(ThreadKeyring, false); !errors.Is(err, ENOKEY) {
		t.Fatalf("the other thread's @t before it made one: %v", err)
	}
	if tOther := must(other.GetKeyringID(ThreadKeyring, true))(t); tMain == tOther {
		t.Fatal("two threads share a thread keyring")
	}
	if main.Session() != other.Session() {
		t.Fatal("a new thread starts with another session")
	}
	// A thread made before @p existed makes its own.
	lone := e.caller(1001, 1001)
	a, b := lone.NewThread(), lone.NewThread()
	defer a.Release()
	defer b.Release()
	if pa, pb := must(a.GetKeyringID(ProcessKeyring, true))(t), must(b.GetKeyringID(ProcessKeyring, true))(t); pa == pb {
		t.Fatal("two threads that each made @p share it")
	}
}

// A caller whose credentials change (setuid, setgroups, capset) keeps
// its keyrings, acts with the new credentials at once, and its thread
// keyring changes owner with it, as key_fsuid_changed does.
func TestSetCred(t *testing.T) {
	e := newEnv(t)
	root := e.caller(0, 0)
	secret := must(root.AddKey("user", "root-only", []byte("s"), SessionKeyring))(t)
	must(0, root.SetPerm(secret, PossAll|UserAll))(t)
	tid := must(root.GetKeyringID(ThreadKeyring, true))(t)
	pid := must(root.GetKeyringID(ProcessKeyring, true))(t)

	root.SetCred(Cred{UID: 1000, GID: 1000, Groups: []uint32{5}, CapsKnown: true})
	if c := root.Cred(); c.UID != 1000 || c.GID != 1000 || len(c.Groups) != 1 || c.PID != 1000 {
		t.Fatalf("credentials after SetCred: %+v", c)
	}
	if got := must(root.GetKeyringID(ThreadKeyring, false))(t); got != tid {
		t.Fatalf("@t %d after setuid, want %d", got, tid)
	}
	if got := must(root.GetKeyringID(ProcessKeyring, false))(t); got != pid {
		t.Fatalf("@p %d after setuid, want %d", got, pid)
	}
	if d := must(root.Describe(tid))(t); d.UID != 1000 || d.GID != 1000 {
		t.Fatalf("@t owned by %d:%d after setuid, want 1000:1000", d.UID, d.GID)
	}
	if d := must(root.Describe(pid))(t); d.UID != 0 {
		t.Fatalf("@p owned by %d after setuid, want 0 (only @t follows)", d.UID)
	}
	// Possessed through the session, the key is still reachable; not
	// possessed, the uid-0 owner's rights are no longer this caller's.
	if _, err := root.Read(secret); err != nil {
		t.Fatalf("read of a possessed key after setuid: %v", err)
	}
	if err := root.Chown(secret, 1000, -1); !errors.Is(err, EACCES) {
		t.Fatalf("chown without CAP_SYS_ADMIN after setuid: %v, want EACCES", err)
	}
}

// Exec drops the thread and process keyrings and keeps the session.
func TestExec(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	ses := c.Session()
	must(c.GetKeyringID(ThreadKeyring, true))(t)
	must(c.GetKeyringID(ProcessKeyring, true))(t)
	c.Exec()
	for _, ring := range []Serial{ThreadKeyring, ProcessKeyring} {
		if _, err := c.GetKeyringID(ring, false); !errors.Is(err, ENOKEY) {
			t.Fatalf("keyring %d after exec: %v, want ENOKEY", ring, err)
		}
	}
	if c.Session() != ses {
		t.Fatal("exec changed the session")
	}
}

// AddKeyCheck answers, for every refusal that does not depend on the
// payload's bytes, exactly what AddKey answers for a payload of that
// length, and nothing where AddKey goes on to look at the bytes.
func TestAddKeyCheckAgreesWithAddKey(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	notRing := must(c.AddKey("user", "not-a-ring", []byte("x"), SessionKeyring))(t)
	closed := must(c.AddKey("keyring", "closed", nil, SessionKeyring))(t)
	must(0, c.SetPerm(closed, (View|Search)<<PossessorShift))(t)
	for _, typ := range []string{"user", "logon", "keyring", "big_key", "no-such-type", "", ".internal"} {
		for _, desc := range []string{"", "d", "svc:d", ".dot", strings.Repeat("x", MaxDescription+1)} {
			for _, n := range []int{0, 1, MaxUserPayload, MaxUserPayload + 1, MaxBigKeyPayload, MaxBigKeyPayload + 1, MaxPayload + 1} {
				for _, ring := range []Serial{SessionKeyring, notRing, closed, 999999} {
					checked := c.AddKeyCheck(typ, desc, n, ring)
					id, added := c.AddKey(typ, desc, make([]byte, n), ring)
					if added == nil {
						c.Unlink(id, ring)
					}
					switch {
					case checked != nil && !sameErrno(checked, added):
						t.Errorf("%q %q %d bytes into %d: check says %v, add says %v", typ, desc, n, ring, checked, added)
					case checked == nil && added != nil && n > 0 && typ == "user" && (n > MaxUserPayload):
						t.Errorf("%q %q %d bytes into %d: check let pass what the length alone refuses (%v)", typ, desc, n, ring, added)
					}
				}
			}
		}
	}
}

func sameErrno(a, b error) bool {
	ea, oka := ErrnoOf(a)
	eb, okb := ErrnoOf(b)
	return oka && okb && ea == eb
}
