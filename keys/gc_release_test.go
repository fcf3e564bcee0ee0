package keys

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRemovedLinkWindow is what the kernel answers about a key right
// after its last link went (keyctl unlink, keyctl clear of its keyring,
// its keyring unlinked, its link displaced by a key of the same type and
// description, a move's source), before the collector drops the removed
// link's reference: the key is still found by serial, possessed by no
// one, so that only its owner's permissions count (here the default
// user byte, view alone), and a removed link is no link. Seen with
// keyutils' keyctl and a C loop against kernel 6.18 (quoted beside each
// row; "window" is the ~17 ms before the kernel's RCU callback drops the
// reference), and after the collector's pass: ENOKEY for everything.
// The release delay is an hour here, so that the window stays open
// until settle (WaitGC) closes it.
func TestRemovedLinkWindow(t *testing.T) {
	type scenario struct {
		name string
		// remove makes the key lose its last link, which was in ring.
		remove func(t *testing.T, c *Caller, id, ring Serial)
		// differ are the rows whose answers differ in this scenario:
		// in the window, and after the collector's pass (skip: the row
		// does not apply).
		differ map[string][2]Errno
	}
	const skip = Errno(9999) // no errno
	// Another "a" is found by a search, and an unlink by type and
	// description removes it (the kernel's key_unlink does the same).
	displaced := map[string][2]Errno{"search": {skip, skip}, "unlink": {0, ENOKEY}}
	displace := func(t *testing.T, c *Caller, ring Serial) {
		other := must(c.AddKey("keyring", "other", nil, SessionKeyring))(t)
		noErr(t, c.Link(must(c.AddKey("user", "a", []byte("other"), other))(t), ring))
	}
	scenarios := []scenario{
		{"unlink", func(t *testing.T, c *Caller, id, ring Serial) { noErr(t, c.Unlink(id, ring)) }, nil},
		{"clear", func(t *testing.T, c *Caller, id, ring Serial) { noErr(t, c.Clear(ring)) }, nil},
		// The keyring itself is in its window: not writable by a
		// non-possessor (C loop: unlink $id $ring → EACCES 100 of 100).
		{"ring-unlinked", func(t *testing.T, c *Caller, id, ring Serial) { noErr(t, c.Unlink(ring, SessionKeyring)) },
			map[string][2]Errno{"unlink": {EACCES, ENOKEY}}},
		// A revoked keyring drops its links; it stays, revoked, for
		// gc_delay (C loop: describe $id ok, unlink $id $ring →
		// EKEYREVOKED, 100 of 100).
		{"ring-revoked", func(t *testing.T, c *Caller, id, ring Serial) { noErr(t, c.Revoke(ring)) },
			map[string][2]Errno{"unlink": {EKEYREVOKED, EKEYREVOKED}}},
		// keyctl link of another user "a" into the keyring (C loop:
		// describe of the displaced key ok, 100 of 100).
		{"displaced", func(t *testing.T, c *Caller, id, ring Serial) { displace(t, c, ring) }, displaced},
		// keyctl move's source: the link moved away, then displaced there.
		{"moved-away", func(t *testing.T, c *Caller, id, ring Serial) {
			dest := must(c.AddKey("keyring", "dest", nil, SessionKeyring))(t)
			noErr(t, c.Move(id, ring, dest, 0))
			displace(t, c, dest)
		}, map[string][2]Errno{"search": {skip, skip}}},
	}
	type row struct {
		op     string
		window Errno // 0: succeeds
		kernel string
	}
	rows := []row{
		{"describe", 0, "keyctl describe → 'alswrv-----v------------ 0 0 user: a'"},
		{"read", EACCES, "keyctl print → Permission denied"},
		{"search", ENOKEY, "keyctl search @s user a → Required key not available"},
		{"link", EACCES, "keyctl link $id @u → Permission denied"},
		{"update", EACCES, "keyctl update → Permission denied"},
		{"setperm", EACCES, "keyctl setperm → Permission denied"},
		{"chown", EACCES, "keyctl chown $id 0 (as root) → Permission denied"},
		{"timeout", EACCES, "keyctl timeout → Permission denied"},
		{"revoke", EACCES, "keyctl revoke → Permission denied"},
		{"invalidate", EACCES, "keyctl invalidate → Permission denied"},
		{"unlink", ENOENT, "keyctl unlink $id $ring → No such file or directory"},
		{"security", 0, "keyctl security → (empty label)"},
		{"clear", EACCES, "keyctl clear $id → Permission denied"},
		{"restrict", EACCES, "keyctl restrict_keyring $id → Permission denied"},
		{"pkey_query", EACCES, "keyctl pkey_query $id 0 → Permission denied"},
	}
	do := func(c *Caller, op string, id, ring Serial) error {
		var err error
		switch op {
		case "describe":
			_, err = c.Describe(id)
		case "read":
			_, err = c.Read(id)
		case "search":
			_, err = c.Search(SessionKeyring, "user", "a", 0)
		case "link":
			err = c.Link(id, UserKeyring)
		case "update":
			err = c.Update(id, []byte("new"))
		case "setperm":
			err = c.SetPerm(id, 0x3f3f0000)
		case "chown":
			err = c.Chown(id, 0, -1)
		case "timeout":
			err = c.SetTimeout(id, 100)
		case "revoke":
			err = c.Revoke(id)
		case "invalidate":
			err = c.Invalidate(id)
		case "unlink":
			err = c.Unlink(id, ring)
		case "security":
			_, err = c.GetSecurity(id)
		case "clear":
			err = c.Clear(id)
		case "restrict":
			err = c.RestrictKeyring(id, nil, nil)
		case "pkey_query":
			_, err = c.PkeyQuery(id, "")
		default:
			panic(op)
		}
		return err
	}
	for _, sc := range scenarios {
		for _, r := range rows {
			want := [2]Errno{r.window, ENOKEY}
			if d, ok := sc.differ[r.op]; ok {
				want = d
			}
			if want[0] == skip {
				continue
			}
			t.Run(sc.name+"/"+r.op, func(t *testing.T) {
				e := newEnv(t, withReleaseDelay(time.Hour))
				c := e.caller(0, 0)
				ring := must(c.AddKey("keyring", "r", nil, SessionKeyring))(t)
				id := must(c.AddKey("user", "a", []byte("payload"), ring))(t)
				sc.remove(t, c, id, ring)
				err := do(c, r.op, id, ring)
				if want[0] == 0 && err != nil || want[0] != 0 && !errors.Is(err, want[0]) {
					t.Errorf("in the window: %s = %v, the kernel's %s", r.op, err, r.kernel)
				}
				e.settle()
				if err := do(c, r.op, id, ring); !errors.Is(err, want[1]) {
					t.Errorf("after the collector's pass: %s = %v, the kernel's %v", r.op, err, want[1])
				}
			})
		}
	}
}

// TestRemovedLinkWindowReadable: in the window, a key whose other
// permissions grant read is read by its owner, as the kernel reads it
// (keyctl setperm $id 0x3f3f0000; keyctl unlink $id @s; keyctl print
// $id → "payload", then ENOKEY); it is listed in /proc/keys, as the
// kernel lists it ("I--Q--- 1 perm 3f3f0000 0 0 user a: 7"), and its
// quota is still charged: on kernel 6.18 a user at its quota (maxkeys
// 200) who unlinks a key and adds another at once gets EDQUOT for ~16 ms
// (a C loop: "EDQUOT 4824 times, ok after 16738 us"), until the RCU
// callback drops the reference. Once the collector has dropped it, the
// key is ENOKEY, unlisted, its payload wiped and its quota back.
func TestRemovedLinkWindowReadable(t *testing.T) {
	e := newEnv(t, withReleaseDelay(time.Hour))
	c := e.caller(1000, 1000)
	id := must(c.AddKey("user", "a", []byte("payload"), SessionKeyring))(t)
	noErr(t, c.SetPerm(id, 0x3f3f0000))
	k := e.s.lookup(id)
	keys, bytes := e.s.QuotaUsage(1000)
	noErr(t, c.Unlink(id, SessionKeyring))
	if p, err := c.Read(id); err != nil || string(p) != "payload" {
		t.Fatalf("read in the window = %q, %v; the kernel reads the payload", p, err)
	}
	hex := fmt.Sprintf("%08x ", uint32(id))
	if !strings.Contains(c.ProcKeys(), hex) {
		t.Errorf("/proc/keys in the window lacks %s:\n%s", hex, c.ProcKeys())
	}
	if k2, b2 := e.s.QuotaUsage(1000); k2 != keys || b2 != bytes-4 { // the link's 4 bytes go with it
		t.Errorf("quota in the window: %d keys, %d bytes; want %d, %d", k2, b2, keys, bytes-4)
	}
	e.settle()
	if _, err := c.Read(id); !errors.Is(err, ENOKEY) {
		t.Fatalf("read after the collector's pass: %v, want ENOKEY", err)
	}
	if strings.Contains(c.ProcKeys(), hex) {
		t.Errorf("/proc/keys still lists %s after the collector's pass", hex)
	}
	if k.loadPayload() != nil {
		t.Error("the destroyed key still holds its payload")
	}
	if k2, b2 := e.s.QuotaUsage(1000); k2 != keys-1 || b2 >= bytes-4 {
		t.Errorf("quota after the collector's pass: %d keys, %d bytes; want %d, under %d", k2, b2, keys-1, bytes-4)
	}
}

// TestRemovedLinkReleasedByCollector: the collector drops a removed
// link's reference by itself once the release delay has passed, without
// WaitGC, and not before.
func TestRemovedLinkReleasedByCollector(t *testing.T) {
	const delay = 200 * time.Millisecond
	e := newEnv(t, withReleaseDelay(delay))
	c := e.caller(0, 0)
	id := must(c.AddKey("user", "a", []byte("payload"), SessionKeyring))(t)
	unlinked := time.Now()
	noErr(t, c.Unlink(id, SessionKeyring))
	if _, err := c.Describe(id); err != nil && time.Since(unlinked) < delay {
		t.Fatalf("describe right after the unlink: %v; the key is found until the collector drops it", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := c.Describe(id); errors.Is(err, ENOKEY) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the unlinked key is still found 20 s later")
		}
		time.Sleep(time.Millisecond)
	}
	if d := time.Since(unlinked); d < delay {
		t.Fatalf("the key went %v after the unlink, before the release delay of %v", d, delay)
	}
}
