package keys

import (
	"bytes"
	"testing"

	"github.com/ukeys/ukeys/rcu"
	"github.com/ukeys/ukeys/workqueue"
)

// Payload memory is wiped, not merely dropped, whenever a payload leaves
// a key: destruction, update, revocation, expiry. The tests keep a slice
// of the payload's backing array (the test hook: package-internal access
// to Key.payload), which also keeps the garbage collector from reusing
// it, and look at its bytes after the service is done with them.

func isZero(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }

// backing returns the bytes the key's current payload holds in memory.
func backing(t *testing.T, s *Service, id Serial) []byte {
	t.Helper()
	k := s.lookup(id)
	if k == nil {
		t.Fatalf("key %d not indexed", id)
	}
	p := k.loadPayload()
	if p == nil || len(p.Data) == 0 {
		t.Fatalf("key %d has no in-memory payload", id)
	}
	return p.Data
}

func TestPayloadWipedOnEveryExit(t *testing.T) {
	secret := []byte("wipe-marker-5f1d2c3b-never-leak")
	cases := []struct {
		name string
		typ  string
		desc string
		gone func(e *env, c *Caller, id Serial)
	}{
		{"unlinked user", "user", "u", func(e *env, c *Caller, id Serial) {
			noErr(e.t, c.Unlink(id, SessionKeyring))
		}},
		{"unlinked logon", "logon", "svc:l", func(e *env, c *Caller, id Serial) {
			noErr(e.t, c.Unlink(id, SessionKeyring))
		}},
		{"unlinked big_key inline", "big_key", "b", func(e *env, c *Caller, id Serial) {
			noErr(e.t, c.Unlink(id, SessionKeyring))
		}},
		{"updated", "user", "up", func(e *env, c *Caller, id Serial) {
			noErr(e.t, c.Update(id, []byte("replacement")))
		}},
		{"revoked", "user", "rv", func(e *env, c *Caller, id Serial) {
			noErr(e.t, c.Revoke(id))
		}},
		{"invalidated", "user", "inv", func(e *env, c *Caller, id Serial) {
			noErr(e.t, c.Invalidate(id))
			e.s.RequestGC()
		}},
		{"expired and reaped", "user", "exp", func(e *env, c *Caller, id Serial) {
			noErr(e.t, c.SetTimeout(id, 1))
			e.clock.advance(2 * e.s.Tunables().GCDelay)
			e.s.RequestGC()
		}},
		{"session keyring released", "user", "rel", func(e *env, c *Caller, id Serial) {
			c.Release()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			c := e.caller(1000, 100)
			id := must(c.AddKey(tc.typ, tc.desc, secret, SessionKeyring))(t)
			mem := backing(t, e.s, id)
			if !bytes.Equal(mem, secret) {
				t.Fatalf("payload memory holds %q", mem)
			}
			tc.gone(e, c, id)
			e.settle()
			if !isZero(mem) {
				t.Fatalf("payload memory after the key let go of it: %q", mem)
			}
			if err := e.s.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Closing the service destroys what is left in the graveyard, wiped too.
func TestPayloadWipedAtClose(t *testing.T) {
	s := New()
	c := s.NewCaller(Cred{UID: 1000, GID: 100, PID: 4242})
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	id, err := c.AddKey("user", "close", []byte("wiped-at-close"), SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	mem := backing(t, s, id)
	c.Release()
	s.Close()
	if !isZero(mem) {
		t.Fatalf("payload memory after Close: %q", mem)
	}
}

// Keys still held when the service closes (a user keyring and a
// persistent keyring outlive their callers: an agent's container
// namespace ends so, with its last process) are wiped too (a big_key's
// file: see package bigkey's TestHeldFileWipedAtClose) once a grace
// period has passed. Before,
// Close left them to Go's collector: "payload memory of the key in the
// user keyring after Close: "wiped-at-close-user"".
func TestHeldKeysWipedAtClose(t *testing.T) {
	sh := NewShare(nil, ShareLimits{Keys: 100, Bytes: 1 << 20, BigKeyFiles: 10})
	s := New(WithShare(sh))
	c := s.NewCaller(Cred{UID: 1000, GID: 100, PID: 4242})
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	user, err := c.AddKey("user", "in-user", []byte("wiped-at-close-user"), UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	pers, err := c.GetPersistent(-1, SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	inPers, err := c.AddKey("logon", "svc:in-persistent", []byte("wiped-at-close-persistent"), pers)
	if err != nil {
		t.Fatal(err)
	}
	mems := map[string][]byte{"the key in the user keyring": backing(t, s, user),
		"the key in the persistent keyring": backing(t, s, inPers)}
	c.Release()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for what, mem := range mems {
		if !isZero(mem) {
			t.Errorf("payload memory of %s after Close: %q", what, mem)
		}
	}
	if u := sh.Usage(); u.BigKeyFiles != 0 {
		t.Errorf("the share still counts %d big_key files once they are closed", u.BigKeyFiles)
	}
	sh.Detach()
}

// A service on a domain and a collectors' queue it shares (the seccomp
// agent's namespaces: WithDomain, WithGCQueue) wipes as one with its own
// does by the time Close returns: the payload an update retired (waiting
// for a grace period on the domain, which a domain of its own would run
// as it closed), the one in the graveyard, the ones still held; and the
// domain and queue serve on for the others.
func TestPayloadWipedAtCloseOnSharedDomain(t *testing.T) {
	dom := rcu.New(rcu.WithName("shared"))
	defer dom.Close()
	wq := workqueue.New(dom, workqueue.WithName("shared-gc"), workqueue.WithWorkers(1))
	defer wq.Close()
	other := New(WithDomain(dom), WithGCQueue(wq))
	defer other.Close()
	s := New(WithDomain(dom), WithGCQueue(wq))
	c := s.NewCaller(Cred{UID: 1000, GID: 100, PID: 4242})
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	up, err := c.AddKey("user", "updated", []byte("retired-by-update"), SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	held, err := c.AddKey("user", "held", []byte("held-in-user-keyring"), UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	mems := map[string][]byte{"the updated key's old payload": backing(t, s, up), "the key in the user keyring": backing(t, s, held)}
	if err := c.Update(up, []byte("replacement")); err != nil {
		t.Fatal(err)
	}
	c.Release()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for what, mem := range mems {
		if !isZero(mem) {
			t.Errorf("payload memory of %s after Close: %q", what, mem)
		}
	}
	// The other service's collector still runs on the shared queue.
	oc := other.NewCaller(Cred{UID: 1000, GID: 100, PID: 4243})
	defer oc.Release()
	if _, err := oc.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	id, err := oc.AddKey("user", "k", []byte("v"), SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	mem := backing(t, other, id)
	if err := oc.Invalidate(id); err != nil {
		t.Fatal(err)
	}
	if err := other.WaitGC(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !isZero(mem) || other.DestroyedKeys() == 0 {
		t.Errorf("the other service's collector did not destroy its invalidated key (payload %q)", mem)
	}
}
