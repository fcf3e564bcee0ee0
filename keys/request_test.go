package keys

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// ringSerials returns the serials linked in keyring id as c reads them.
func ringSerials(c *Caller, id Serial) ([]Serial, error) {
	b, err := c.Read(id)
	if err != nil {
		return nil, err
	}
	var out []Serial
	for i := 0; i+4 <= len(b); i += 4 {
		out = append(out, Serial(uint32(b[i])|uint32(b[i+1])<<8|uint32(b[i+2])<<16|uint32(b[i+3])<<24))
	}
	return out, nil
}

// linked reports whether keyring ring (as c reads it) links key.
func linked(t *testing.T, c *Caller, ring, key Serial) bool {
	t.Helper()
	ids, err := ringSerials(c, ring)
	if err != nil {
		t.Fatalf("read keyring %d: %v", ring, err)
	}
	return slices.Contains(ids, key)
}

// errnoIs compares an error with an errno, 0 meaning no error.
func errnoIs(err error, want Errno) bool {
	if want == 0 {
		return err == nil
	}
	return errors.Is(err, want)
}

// upcalls counts the upcalls of a test's Upcaller and remembers them.
type upcalls struct {
	mu  sync.Mutex
	ups []Upcall
}

func (r *upcalls) record(u *Upcall) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ups = append(r.ups, *u)
	return len(r.ups)
}

func (r *upcalls) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ups)
}

func (r *upcalls) last() Upcall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ups[len(r.ups)-1]
}

// helper returns an Upcaller that records each upcall, assumes the
// authority to construct its key and runs fn as the helper; n counts the
// upcalls from 1.
func (r *upcalls) helper(t *testing.T, fn func(ctx context.Context, u *Upcall, h *Caller, n int) error) Upcaller {
	return UpcallFunc(func(ctx context.Context, u *Upcall) error {
		n := r.record(u)
		if _, err := u.Helper.AssumeAuthority(u.Key); err != nil {
			t.Errorf("helper: assume authority for %d: %v", u.Key, err)
			return err
		}
		return fn(ctx, u, u.Helper, n)
	})
}

// instantiateWith is a helper body that instantiates the key with payload.
func instantiateWith(t *testing.T, payload string) func(context.Context, *Upcall, *Caller, int) error {
	return func(_ context.Context, u *Upcall, h *Caller, _ int) error {
		if err := h.Instantiate(u.Key, []byte(payload), 0); err != nil {
			t.Errorf("helper: instantiate %d: %v", u.Key, err)
		}
		return nil
	}
}

func TestRequestKeyFindsExisting(t *testing.T) {
	cases := []struct {
		name string
		// setup adds what the request should find and returns the
		// expected serial and the destination to pass.
		setup   func(t *testing.T, c *Caller) (want, dest Serial)
		callout []byte
		err     Errno
	}{
		{"in session keyring", func(t *testing.T, c *Caller) (Serial, Serial) {
			return must(c.AddKey("user", "k", []byte("v"), SessionKeyring))(t), 0
		}, nil, 0},
		{"found before any upcall", func(t *testing.T, c *Caller) (Serial, Serial) {
			return must(c.AddKey("user", "k", []byte("v"), SessionKeyring))(t), 0
		}, []byte("info"), 0},
		{"in a nested keyring", func(t *testing.T, c *Caller) (Serial, Serial) {
			r := must(c.AddKey("keyring", "nest", nil, SessionKeyring))(t)
			return must(c.AddKey("user", "k", []byte("v"), r))(t), 0
		}, nil, 0},
		{"in the thread keyring", func(t *testing.T, c *Caller) (Serial, Serial) {
			return must(c.AddKey("user", "k", []byte("v"), ThreadKeyring))(t), 0
		}, nil, 0},
		{"linked into dest", func(t *testing.T, c *Caller) (Serial, Serial) {
			d := must(c.AddKey("keyring", "dest", nil, SessionKeyring))(t)
			return must(c.AddKey("user", "k", []byte("v"), SessionKeyring))(t), d
		}, nil, 0},
		{"dest given as special id", func(t *testing.T, c *Caller) (Serial, Serial) {
			return must(c.AddKey("user", "k", []byte("v"), SessionKeyring))(t), ProcessKeyring
		}, nil, 0},
		{"no link permission with dest", func(t *testing.T, c *Caller) (Serial, Serial) {
			d := must(c.AddKey("keyring", "dest", nil, SessionKeyring))(t)
			k := must(c.AddKey("user", "k", []byte("v"), SessionKeyring))(t)
			if err := c.SetPerm(k, (View|Read|Write|Search|SetAttr)<<PossessorShift|View<<UserShift); err != nil {
				t.Fatal(err)
			}
			return k, d
		}, nil, EACCES},
		{"no link permission without dest", func(t *testing.T, c *Caller) (Serial, Serial) {
			k := must(c.AddKey("user", "k", []byte("v"), SessionKeyring))(t)
			if err := c.SetPerm(k, (View|Read|Write|Search|SetAttr)<<PossessorShift|View<<UserShift); err != nil {
				t.Fatal(err)
			}
			return k, 0
		}, nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rec upcalls
			e := newEnv(t, WithUpcall(rec.helper(t, instantiateWith(t, "built"))))
			c := e.caller(1000, 1000)
			want, dest := tc.setup(t, c)
			got, err := c.RequestKey("user", "k", tc.callout, dest)
			if !errnoIs(err, tc.err) {
				t.Fatalf("RequestKey: %v, want %v", err, tc.err)
			}
			if rec.count() != 0 {
				t.Fatalf("%d upcalls for a key that exists", rec.count())
			}
			if tc.err != 0 {
				if dest != 0 && linked(t, c, dest, want) {
					t.Fatalf("key linked into dest despite %v", tc.err)
				}
				return
			}
			if got != want {
				t.Fatalf("RequestKey = %d, want %d", got, want)
			}
			if dest != 0 && !linked(t, c, dest, want) {
				t.Fatalf("key %d not linked into dest %d", want, dest)
			}
		})
	}
}

func TestRequestKeyErrors(t *testing.T) {
	cases := []struct {
		name      string
		typ, desc string
		callout   []byte
		dest      Serial
		setup     func(t *testing.T, e *env, c *Caller)
		want      Errno
	}{
		{name: "nothing found, no callout", typ: "user", desc: "absent", want: ENOKEY},
		{name: "keyring with callout", typ: "keyring", desc: "absent", callout: []byte("x"), want: EPERM},
		{name: "keyring without callout", typ: "keyring", desc: "absent", want: ENOKEY},
		{name: "unknown type", typ: "nosuch", desc: "d", want: ENOKEY},
		{name: "unknown type with callout", typ: "nosuch", desc: "d", callout: []byte("x"), want: ENOKEY},
		{name: "empty type", typ: "", desc: "d", want: EINVAL},
		{name: "type of 32 bytes", typ: strings.Repeat("t", 32), desc: "d", want: EINVAL},
		{name: "internal type", typ: ".request_key_auth", desc: "d", want: EPERM},
		{name: "dot type", typ: ".dead", desc: "d", callout: []byte("x"), want: EPERM},
		{name: "description too long", typ: "user", desc: strings.Repeat("d", 4096), want: EINVAL},
		{name: "callout too long", typ: "user", desc: "d", callout: make([]byte, 4096), want: EINVAL},
		{name: "no such dest", typ: "user", desc: "d", dest: 12345, want: ENOKEY},
		{name: "group keyring dest", typ: "user", desc: "d", dest: GroupKeyring, want: EINVAL},
		{name: "revoked key", typ: "user", desc: "r", callout: []byte("x"), setup: func(t *testing.T, e *env, c *Caller) {
			if err := c.Revoke(must(c.AddKey("user", "r", []byte("v"), SessionKeyring))(t)); err != nil {
				t.Fatal(err)
			}
		}, want: EKEYREVOKED},
		{name: "expired key is ignored", typ: "user", desc: "x", setup: func(t *testing.T, e *env, c *Caller) {
			if err := c.SetTimeout(must(c.AddKey("user", "x", []byte("v"), SessionKeyring))(t), 5); err != nil {
				t.Fatal(err)
			}
			e.clock.advance(6 * time.Second)
		}, want: ENOKEY},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rec upcalls
			e := newEnv(t, WithUpcall(rec.helper(t, instantiateWith(t, "built"))))
			c := e.caller(1000, 1000)
			if tc.setup != nil {
				tc.setup(t, e, c)
			}
			_, err := c.RequestKey(tc.typ, tc.desc, tc.callout, tc.dest)
			wantErr(t, "RequestKey", err, tc.want)
			if rec.count() != 0 {
				t.Fatalf("%d upcalls, want none", rec.count())
			}
		})
	}
}

// TestUpcallRequest checks what the helper is given: the kernel's
// argument vector, the callout information, and a caller whose session
// keyring holds the authorisation key.
func TestUpcallRequest(t *testing.T) {
	var rec upcalls
	e := newEnv(t, WithUpcall(UpcallFunc(func(ctx context.Context, u *Upcall) error {
		rec.record(u)
		h := u.Helper
		sess, err := ringSerials(h, SessionKeyring)
		if err != nil || len(sess) != 1 || sess[0] != u.AuthKey {
			t.Errorf("helper session holds %v (%v), want [%d]", sess, err, u.AuthKey)
		}
		if d, err := h.Describe(SessionKeyring); err != nil || d.Description != fmt.Sprintf("_req.%d", u.Key) || d.Perm != PermSessionAnon {
			t.Errorf("helper session %+v, %v", d, err)
		}
		if d, err := h.Describe(u.AuthKey); err != nil || d.String() != fmt.Sprintf(".request_key_auth;%d;%d;1b010000;%x", u.UID, u.GID, u.Key) {
			t.Errorf("auth key %q, %v", d, err)
		}
		if _, err := h.Read(ReqKeyAuthKey); !errors.Is(err, ENOKEY) {
			t.Errorf("callout read before assuming authority: %v, want ENOKEY", err)
		}
		got, err := h.AssumeAuthority(u.Key)
		if err != nil || got != u.AuthKey {
			t.Errorf("AssumeAuthority = %d, %v; want %d", got, err, u.AuthKey)
		}
		if id, err := h.GetKeyringID(ReqKeyAuthKey, false); err != nil || id != u.AuthKey {
			t.Errorf("@reqkey_auth = %d, %v", id, err)
		}
		if info, err := h.Read(ReqKeyAuthKey); err != nil || string(info) != "some info" {
			t.Errorf("callout read %q, %v", info, err)
		}
		if d, err := h.Describe(u.Key); err != nil || d.String() != fmt.Sprintf("user;%d;%d;3f010000;%s", u.UID, u.GID, u.Description) {
			t.Errorf("target %q, %v", d, err)
		}
		// The requestor keyring is where the key goes.
		if id, err := h.GetKeyringID(RequestorKeyring, false); err != nil || id != u.Session {
			t.Errorf("@reqkey requestor keyring = %d, %v; want %d", id, err, u.Session)
		}
		if !strings.Contains(h.ProcKeys(), fmt.Sprintf("%s ---QU--", hex8(u.Key))) {
			t.Errorf("key under construction not flagged U:\n%s", h.ProcKeys())
		}
		return h.Instantiate(u.Key, []byte("payload"), 0)
	})))
	c := e.caller(1000, 1000)
	id := must(c.RequestKey("user", "wanted", []byte("some info"), 0))(t)
	if got := must(c.Read(id))(t); string(got) != "payload" {
		t.Fatalf("payload %q", got)
	}
	u := rec.last()
	sess := must(c.GetKeyringID(SessionKeyring, false))(t)
	if u.Key != id || u.Op != "create" || u.Type != "user" || u.Description != "wanted" ||
		string(u.CalloutInfo) != "some info" || u.UID != 1000 || u.GID != 1000 {
		t.Fatalf("upcall %+v", u)
	}
	want := []string{"create", fmt.Sprint(id), "1000", "1000", "0", "0", fmt.Sprint(sess)}
	if got := u.Args(); !slices.Equal(got, want) {
		t.Fatalf("Args() = %q, want %q", got, want)
	}
	if !linked(t, c, SessionKeyring, id) {
		t.Fatal("constructed key not linked into the session keyring")
	}

	// With thread and process keyrings, and without a session keyring
	// (the user-session keyring stands in).
	th := must(c.GetKeyringID(ThreadKeyring, true))(t)
	pr := must(c.GetKeyringID(ProcessKeyring, true))(t)
	id2 := must(c.RequestKey("user", "wanted2", []byte("some info"), SessionKeyring))(t)
	u = rec.last()
	if got, want := u.Args(), []string{"create", fmt.Sprint(id2), "1000", "1000", fmt.Sprint(th), fmt.Sprint(pr), fmt.Sprint(sess)}; !slices.Equal(got, want) {
		t.Fatalf("Args() = %q, want %q", got, want)
	}
	nosess := e.s.NewCaller(Cred{UID: 1001, GID: 1001, PID: 7})
	defer nosess.Release()
	id3 := must(nosess.RequestKey("user", "wanted", []byte("some info"), 0))(t)
	us := must(nosess.GetKeyringID(UserSessionKeyring, false))(t)
	u = rec.last()
	if got, want := u.Args(), []string{"create", fmt.Sprint(id3), "1001", "1001", "0", "0", fmt.Sprint(us)}; !slices.Equal(got, want) {
		t.Fatalf("Args() without session = %q, want %q", got, want)
	}
	// The helper's session and authorisation key are gone afterwards.
	e.settle()
	for _, l := range strings.Split(c.ProcKeys(), "\n") {
		if strings.Contains(l, "_req.") || strings.Contains(l, ".request_") {
			t.Fatalf("helper keys left after construction: %q", l)
		}
	}
}

// TestConstructionOutcomes runs the helper's possible answers and checks
// what the first requester and later ones get, and that a negative key
// stops further upcalls only until it expires.
func TestConstructionOutcomes(t *testing.T) {
	cases := []struct {
		name   string
		helper func(ctx context.Context, u *Upcall, h *Caller) error
		first  Errno         // what the constructing requester gets
		later  Errno         // what later requesters get while the key lasts
		lasts  time.Duration // how long the negative key lasts
	}{
		{name: "instantiate", helper: func(_ context.Context, u *Upcall, h *Caller) error {
			return h.Instantiate(u.Key, []byte("ok"), 0)
		}},
		{name: "negate", helper: func(_ context.Context, u *Upcall, h *Caller) error {
			return h.Negate(u.Key, 30, 0)
		}, first: ENOKEY, later: ENOKEY, lasts: 30 * time.Second},
		{name: "reject", helper: func(_ context.Context, u *Upcall, h *Caller) error {
			return h.Reject(u.Key, 45, EKEYREJECTED, 0)
		}, first: EKEYREJECTED, later: EKEYREJECTED, lasts: 45 * time.Second},
		{name: "reject with another errno", helper: func(_ context.Context, u *Upcall, h *Caller) error {
			return h.Reject(u.Key, 10, EKEYEXPIRED, 0)
		}, first: EKEYEXPIRED, later: EKEYEXPIRED, lasts: 10 * time.Second},
		{name: "negate for no time", helper: func(_ context.Context, u *Upcall, h *Caller) error {
			// The kernel finds the key invalid (expired) once the helper is
			// done, and fails the request with ENOKEY.
			return h.Reject(u.Key, 0, EKEYREJECTED, 0)
		}, first: ENOKEY},
		{name: "helper returns without an answer", helper: func(context.Context, *Upcall, *Caller) error {
			return nil
		}, first: ENOKEY, later: ENOKEY, lasts: NegativeTimeout},
		{name: "helper fails", helper: func(context.Context, *Upcall, *Caller) error {
			return errors.New("exit status 1")
		}, first: ENOKEY, later: ENOKEY, lasts: NegativeTimeout},
		{name: "helper cannot run", helper: func(context.Context, *Upcall, *Caller) error {
			return ENOENT
		}, first: ENOENT, later: ENOKEY, lasts: NegativeTimeout},
		{name: "helper program missing", helper: func(context.Context, *Upcall, *Caller) error {
			return &fs.PathError{Op: "fork/exec", Path: "/sbin/request-key", Err: syscall.ENOENT}
		}, first: ENOENT, later: ENOKEY, lasts: NegativeTimeout},
		{name: "helper errors after instantiating", helper: func(_ context.Context, u *Upcall, h *Caller) error {
			if err := h.Instantiate(u.Key, []byte("ok"), 0); err != nil {
				return err
			}
			return EIO
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rec upcalls
			e := newEnv(t, WithUpcall(rec.helper(t, func(ctx context.Context, u *Upcall, h *Caller, n int) error {
				if n > 1 {
					return h.Instantiate(u.Key, []byte("again"), 0)
				}
				return tc.helper(ctx, u, h)
			})))
			c := e.caller(1000, 1000)
			id, err := c.RequestKey("user", "k", []byte("info"), 0)
			if !errnoIs(err, tc.first) {
				t.Fatalf("first RequestKey: %v, want %v", err, tc.first)
			}
			if n := rec.count(); n != 1 {
				t.Fatalf("%d upcalls, want 1", n)
			}
			key := rec.last().Key
			if tc.first == 0 {
				if id != key {
					t.Fatalf("RequestKey = %d, upcall was for %d", id, key)
				}
				if again := must(c.RequestKey("user", "k", []byte("info"), 0))(t); again != id {
					t.Fatalf("second RequestKey = %d, want %d", again, id)
				}
				if rec.count() != 1 {
					t.Fatal("a positive key was constructed again")
				}
				return
			}
			if !linked(t, c, SessionKeyring, key) {
				t.Fatal("the failed key is not linked into the destination")
			}
			if tc.lasts > 0 {
				_, err := c.Read(key)
				wantErr(t, "Read negative key", err, tc.later)
				for _, callout := range [][]byte{[]byte("info"), nil} {
					_, err := c.RequestKey("user", "k", callout, 0)
					wantErr(t, "RequestKey while negative", err, tc.later)
				}
				e.clock.advance(tc.lasts - time.Second)
				_, err = c.RequestKey("user", "k", []byte("info"), 0)
				wantErr(t, "RequestKey just before expiry", err, tc.later)
				if rec.count() != 1 {
					t.Fatalf("%d upcalls while the negative key lasted", rec.count())
				}
				e.clock.advance(time.Second)
			}
			// Expired, the negative key is ignored: without a callout
			// nothing is found; with one, the key is constructed anew.
			_, err = c.RequestKey("user", "k", nil, 0)
			wantErr(t, "RequestKey without callout after expiry", err, ENOKEY)
			id2 := must(c.RequestKey("user", "k", []byte("info"), 0))(t)
			if rec.count() != 2 || id2 == key {
				t.Fatalf("after expiry: %d upcalls, key %d (old %d)", rec.count(), id2, key)
			}
			if got := must(c.Read(id2))(t); string(got) != "again" {
				t.Fatalf("reconstructed payload %q", got)
			}
			if linked(t, c, SessionKeyring, key) {
				t.Fatal("the old negative key is still linked beside the new one")
			}
		})
	}
}

func TestNoUpcaller(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	_, err := c.RequestKey("user", "k", []byte("info"), 0)
	wantErr(t, "RequestKey without upcaller", err, ENOENT)
	ids := must(ringSerials(c, SessionKeyring))(t)
	if len(ids) != 1 {
		t.Fatalf("session holds %v, want the negated key", ids)
	}
	_, err = c.Read(ids[0])
	wantErr(t, "Read negated key", err, ENOKEY)
	_, err = c.RequestKey("user", "k", []byte("info"), 0)
	wantErr(t, "RequestKey of the negated key", err, ENOKEY)
	e.clock.advance(NegativeTimeout)
	_, err = c.RequestKey("user", "k", []byte("info"), 0)
	wantErr(t, "RequestKey after the negative timeout", err, ENOENT)
}

func TestUpcallTimeout(t *testing.T) {
	t.Run("helper observes ctx", func(t *testing.T) {
		var rec upcalls
		e := newEnv(t, WithUpcallTimeout(20*time.Millisecond), WithUpcall(rec.helper(t, func(ctx context.Context, u *Upcall, h *Caller, _ int) error {
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				t.Errorf("ctx cause %v, want a deadline", context.Cause(ctx))
			}
			// The key was negated before ctx ended.
			if err := h.Instantiate(u.Key, []byte("late"), 0); !errors.Is(err, EBUSY) {
				t.Errorf("late Instantiate: %v, want EBUSY", err)
			}
			return ctx.Err()
		})))
		c := e.caller(1000, 1000)
		_, err := c.RequestKey("user", "slow", []byte("x"), 0)
		wantErr(t, "RequestKey with a hung helper", err, ENOKEY)
		_, err = c.Read(rec.last().Key)
		wantErr(t, "Read timed-out key", err, ENOKEY)
	})
	t.Run("helper ignores ctx", func(t *testing.T) {
		var rec upcalls
		release := make(chan struct{})
		var done atomic.Bool
		e := newEnv(t, WithUpcallTimeout(20*time.Millisecond), WithUpcall(rec.helper(t, func(ctx context.Context, u *Upcall, h *Caller, _ int) error {
			<-release
			done.Store(true)
			return nil
		})))
		c := e.caller(1000, 1000)
		// The requester is answered at the timeout, while the helper
		// still runs.
		_, err := c.RequestKey("user", "stuck", []byte("x"), 0)
		wantErr(t, "RequestKey with a stuck helper", err, ENOKEY)
		if done.Load() {
			t.Fatal("helper finished before it was released")
		}
		close(release)
		if err := e.s.Close(); err != nil {
			t.Fatal(err)
		}
		if !done.Load() {
			t.Fatal("Close returned before the upcall did")
		}
	})
}

func TestCloseWaitsForUpcalls(t *testing.T) {
	started := make(chan struct{})
	var finished atomic.Bool
	e := newEnv(t, WithUpcallTimeout(50*time.Millisecond), WithUpcall(UpcallFunc(func(ctx context.Context, u *Upcall) error {
		close(started)
		<-ctx.Done()
		finished.Store(true)
		return ctx.Err()
	})))
	c := e.caller(1000, 1000)
	res := make(chan error, 1)
	go func() {
		_, err := c.RequestKey("user", "k", []byte("x"), 0)
		res <- err
	}()
	<-started
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	if !finished.Load() {
		t.Fatal("Close returned while an upcall was running")
	}
	wantErr(t, "RequestKey interrupted by Close", <-res, ENOKEY)
}

// TestInstantiateRules runs, inside one helper, the error paths of
// Instantiate, Negate, Reject and AssumeAuthority in order: each step may
// depend on the ones before it.
func TestInstantiateRules(t *testing.T) {
	var other, plain, foreign Serial // keys the helper may name
	var c, forked *Caller
	var svc *Service
	type step struct {
		name string
		do   func(u *Upcall, h *Caller) error
		want Errno
	}
	steps := []step{
		{"reject errno 0", func(u *Upcall, h *Caller) error { return h.Reject(u.Key, 1, 0, 0) }, EINVAL},
		{"reject errno 4095", func(u *Upcall, h *Caller) error { return h.Reject(u.Key, 1, 4095, 0) }, EINVAL},
		{"reject ERESTARTSYS", func(u *Upcall, h *Caller) error { return h.Reject(u.Key, 1, 512, 0) }, EINVAL},
		{"reject ERESTARTNOINTR", func(u *Upcall, h *Caller) error { return h.Reject(u.Key, 1, 513, 0) }, EINVAL},
		{"reject ERESTART_RESTARTBLOCK", func(u *Upcall, h *Caller) error { return h.Reject(u.Key, 1, 516, 0) }, EINVAL},
		{"instantiate without authority", func(u *Upcall, h *Caller) error { return h.Instantiate(u.Key, []byte("v"), 0) }, EPERM},
		{"negate without authority", func(u *Upcall, h *Caller) error { return h.Negate(u.Key, 1, 0) }, EPERM},
		{"reject without authority", func(u *Upcall, h *Caller) error { return h.Reject(u.Key, 1, EKEYREJECTED, 0) }, EPERM},
		{"requestor assumes authority", func(u *Upcall, h *Caller) error {
			_, err := c.AssumeAuthority(u.Key) // not in its keyrings
			return err
		}, ENOKEY},
		{"assume authority of a negative id", func(u *Upcall, h *Caller) error { _, err := h.AssumeAuthority(-1); return err }, EINVAL},
		{"assume authority of an unknown key", func(u *Upcall, h *Caller) error { _, err := h.AssumeAuthority(other); return err }, ENOKEY},
		{"assume authority", func(u *Upcall, h *Caller) error {
			id, err := h.AssumeAuthority(u.Key)
			if err == nil && id != u.AuthKey {
				return fmt.Errorf("AssumeAuthority = %d, want %d", id, u.AuthKey)
			}
			return err
		}, 0},
		{"assume it again", func(u *Upcall, h *Caller) error { _, err := h.AssumeAuthority(u.Key); return err }, 0},
		{"instantiate another key", func(u *Upcall, h *Caller) error { return h.Instantiate(other, []byte("v"), 0) }, EPERM},
		{"negate another key", func(u *Upcall, h *Caller) error { return h.Negate(other, 1, 0) }, EPERM},
		{"reject another key", func(u *Upcall, h *Caller) error { return h.Reject(other, 1, EKEYREJECTED, 0) }, EPERM},
		{"payload over 1 MiB", func(u *Upcall, h *Caller) error { return h.Instantiate(u.Key, make([]byte, 1<<20), 0) }, EINVAL},
		{"payload the type refuses", func(u *Upcall, h *Caller) error { return h.Instantiate(u.Key, nil, 0) }, EINVAL},
		{"dest is the auth key", func(u *Upcall, h *Caller) error { return h.Instantiate(u.Key, []byte("v"), ReqKeyAuthKey) }, EINVAL},
		{"dest below the special ids", func(u *Upcall, h *Caller) error { return h.Instantiate(u.Key, []byte("v"), -9) }, ENOKEY},
		{"negate into a dest below the special ids", func(u *Upcall, h *Caller) error { return h.Negate(u.Key, 1, -100) }, ENOKEY},
		{"dest does not exist", func(u *Upcall, h *Caller) error { return h.Instantiate(u.Key, []byte("v"), 0x3fffffff) }, ENOKEY},
		{"dest not writable", func(u *Upcall, h *Caller) error { return h.Instantiate(u.Key, []byte("v"), foreign) }, EACCES},
		{"dest not a keyring", func(u *Upcall, h *Caller) error { return h.Instantiate(u.Key, []byte("v"), plain) }, ENOTDIR},
		{"reject into a restricted keyring", func(u *Upcall, h *Caller) error {
			r, err := h.AddKey("keyring", "closed", nil, SessionKeyring)
			if err != nil {
				return err
			}
			if err := h.RestrictKeyring(r, nil, nil); err != nil {
				return err
			}
			if err := h.Instantiate(u.Key, []byte("v"), r); !errors.Is(err, EPERM) {
				return fmt.Errorf("instantiate into restricted keyring: %v, want EPERM", err)
			}
			return h.Reject(u.Key, 1, EKEYREJECTED, r)
		}, EPERM},
		{"still under construction", func(u *Upcall, h *Caller) error {
			if !svc.lookup(u.Key).underConstruction() {
				return errors.New("a failed call settled the key")
			}
			return nil
		}, 0},
		{"a second helper assumes authority", func(u *Upcall, h *Caller) error {
			forked = h.Fork(4242)
			_, err := forked.AssumeAuthority(u.Key)
			return err
		}, 0},
		{"instantiate", func(u *Upcall, h *Caller) error { return h.Instantiate(u.Key, []byte("v"), 0) }, 0},
		{"instantiate again: authority dropped", func(u *Upcall, h *Caller) error { return h.Instantiate(u.Key, []byte("w"), 0) }, EPERM},
		{"negate after instantiation", func(u *Upcall, h *Caller) error { return h.Negate(u.Key, 1, 0) }, EPERM},
		{"auth key is gone from @reqkey_auth", func(u *Upcall, h *Caller) error { _, err := h.GetKeyringID(ReqKeyAuthKey, false); return err }, ENOKEY},
		{"assume the used authority", func(u *Upcall, h *Caller) error {
			_, err := h.AssumeAuthority(u.Key)
			if errors.Is(err, ENOKEY) {
				// The collector may already have pruned the invalidated
				// authorisation from the helper's session keyring: the
				// kernel's collector races its searches the same way.
				return EKEYREVOKED
			}
			return err
		}, EKEYREVOKED},
		{"second helper instantiates", func(u *Upcall, h *Caller) error { return forked.Instantiate(u.Key, []byte("w"), 0) }, EBUSY},
		{"second helper negates", func(u *Upcall, h *Caller) error { return forked.Negate(u.Key, 1, 0) }, EBUSY},
		{"second helper rejects", func(u *Upcall, h *Caller) error {
			return forked.Reject(u.Key, 1, EKEYREJECTED, 0)
		}, EBUSY},
		{"drop authority", func(u *Upcall, h *Caller) error {
			f := forked
			defer f.Release()
			if id, err := f.AssumeAuthority(0); err != nil || id != 0 {
				return fmt.Errorf("AssumeAuthority(0) = %d, %v", id, err)
			}
			if err := f.Instantiate(u.Key, []byte("w"), 0); !errors.Is(err, EPERM) {
				return fmt.Errorf("instantiate after dropping authority: %v, want EPERM", err)
			}
			_, err := f.GetKeyringID(ReqKeyAuthKey, false)
			return err
		}, ENOKEY},
	}
	ran := 0
	env := newEnv(t, WithUpcall(UpcallFunc(func(ctx context.Context, u *Upcall) error {
		for _, s := range steps {
			if err := s.do(u, u.Helper); !errnoIs(err, s.want) {
				t.Errorf("%s: %v, want %v", s.name, err, s.want)
			}
			ran++
		}
		return nil
	})))
	svc = env.s
	c = env.caller(1000, 1000)
	stranger := env.caller(2000, 2000)
	foreign = must(stranger.AddKey("keyring", "theirs", nil, SessionKeyring))(t)
	plain = must(c.AddKey("user", "plain", []byte("p"), SessionKeyring))(t)
	other = must(c.AddKey("user", "other", []byte("o"), SessionKeyring))(t)
	id := must(c.RequestKey("user", "target", []byte("info"), 0))(t)
	if ran != len(steps) {
		t.Fatalf("ran %d of %d steps", ran, len(steps))
	}
	if got := must(c.Read(id))(t); string(got) != "v" {
		t.Fatalf("payload %q, want the first instantiation's", got)
	}
}

// TestInstantiationDestination checks where Instantiate, Negate and
// Reject link the key: nowhere for 0, the named keyring (which needs
// Write) for a positive id, and the requestor's destination for every
// special keyring id but the auth key's.
func TestInstantiationDestination(t *testing.T) {
	const (
		toNone = iota
		toDest
		toHelper
	)
	cases := []struct {
		name   string
		ring   func(helperRing Serial) Serial
		negate bool
		want   int
	}{
		{"zero", func(Serial) Serial { return 0 }, false, toNone},
		{"positive id", func(h Serial) Serial { return h }, false, toHelper},
		{"thread", func(Serial) Serial { return ThreadKeyring }, false, toDest},
		{"process", func(Serial) Serial { return ProcessKeyring }, false, toDest},
		{"session", func(Serial) Serial { return SessionKeyring }, false, toDest},
		{"user", func(Serial) Serial { return UserKeyring }, false, toDest},
		{"user session", func(Serial) Serial { return UserSessionKeyring }, false, toDest},
		{"group", func(Serial) Serial { return GroupKeyring }, false, toDest},
		{"requestor", func(Serial) Serial { return RequestorKeyring }, false, toDest},
		{"negate to zero", func(Serial) Serial { return 0 }, true, toNone},
		{"negate to positive id", func(h Serial) Serial { return h }, true, toHelper},
		{"negate to requestor", func(Serial) Serial { return RequestorKeyring }, true, toDest},
		{"negate to session", func(Serial) Serial { return SessionKeyring }, true, toDest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c *Caller
			var dest Serial
			var inDest, inHelper bool
			var rec upcalls
			e := newEnv(t, WithUpcall(rec.helper(t, func(_ context.Context, u *Upcall, h *Caller, _ int) error {
				// Take the key out of the destination construction linked it
				// into, to see whether the helper's call links it again.
				if err := c.Unlink(u.Key, dest); err != nil {
					t.Errorf("unlink from dest: %v", err)
				}
				hr, err := h.AddKey("keyring", "mine", nil, SessionKeyring)
				if err != nil {
					t.Errorf("helper keyring: %v", err)
					return err
				}
				ring := tc.ring(hr)
				if tc.negate {
					err = h.Negate(u.Key, 10, ring)
				} else {
					err = h.Instantiate(u.Key, []byte("v"), ring)
				}
				if err != nil {
					t.Errorf("helper: %v", err)
				}
				ids, _ := ringSerials(c, dest)
				inDest = slices.Contains(ids, u.Key)
				ids, _ = ringSerials(h, hr)
				inHelper = slices.Contains(ids, u.Key)
				if ids, _ := ringSerials(h, SessionKeyring); slices.Contains(ids, u.Key) {
					t.Errorf("key linked into the helper's own session keyring")
				}
				return nil
			})))
			c = e.caller(1000, 1000)
			dest = must(c.AddKey("keyring", "dest", nil, SessionKeyring))(t)
			_, err := c.RequestKey("user", "k", []byte("x"), dest)
			if tc.negate {
				wantErr(t, "RequestKey", err, ENOKEY)
			} else if err != nil {
				t.Fatal(err)
			}
			if got := map[bool]map[bool]int{false: {false: toNone, true: toHelper}, true: {false: toDest, true: -1}}[inDest][inHelper]; got != tc.want {
				t.Fatalf("key in dest %v, in helper keyring %v", inDest, inHelper)
			}
		})
	}
}

// TestHelperAuthority checks what assuming the authority gives a helper:
// possession of the requestor's keyrings, and describe and set-timeout
// rights on the key being constructed even without permission.
func TestHelperAuthority(t *testing.T) {
	var c, stranger *Caller
	var secret, reqSession Serial
	var rec upcalls
	e := newEnv(t, WithUpcall(UpcallFunc(func(ctx context.Context, u *Upcall) error {
		rec.record(u)
		h := u.Helper
		check := func(what string, err error, want Errno) {
			if !errnoIs(err, want) {
				t.Errorf("%s: %v, want %v", what, err, want)
			}
		}
		// The requestor takes every right on the key away.
		check("requestor SetPerm", c.SetPerm(u.Key, 0), 0)
		_, err := stranger.Describe(u.Key)
		check("Describe without the authorisation", err, EACCES)
		check("SetTimeout without the authorisation", stranger.SetTimeout(u.Key, 100), EACCES)
		_, err = stranger.GetSecurity(u.Key)
		check("GetSecurity without the authorisation", err, ENOKEY)

		// Before assuming authority, the helper does not possess the
		// requestor's keyrings.
		_, err = h.Search(reqSession, "user", "secret", 0)
		check("Search before assuming authority", err, EACCES)
		_, err = h.Read(secret)
		check("Read before assuming authority", err, EACCES)
		_, err = h.RequestKey("user", "secret", nil, 0)
		check("RequestKey before assuming authority", err, ENOKEY)
		// Holding the authorisation key is enough for the override.
		if d, err := h.Describe(u.Key); err != nil || d.Perm != 0 || d.Description != "wanted" {
			t.Errorf("Describe by the holder: %+v, %v", d, err)
		}

		check("AssumeAuthority", func() error { _, err := h.AssumeAuthority(u.Key); return err }(), 0)
		got, err := h.Search(reqSession, "user", "secret", 0)
		if err != nil || got != secret {
			t.Errorf("Search of the requestor's session = %d, %v; want %d", got, err, secret)
		}
		if p, err := h.Read(secret); err != nil || string(p) != "s3cret" {
			t.Errorf("Read of the requestor's key = %q, %v", p, err)
		}
		if got, err := h.RequestKey("user", "secret", nil, 0); err != nil || got != secret {
			t.Errorf("RequestKey in the requestor's keyrings = %d, %v", got, err)
		}
		if d, err := h.Describe(u.Key); err != nil || d.Perm != 0 {
			t.Errorf("Describe with authority: %+v, %v", d, err)
		}
		check("SetTimeout with authority", h.SetTimeout(u.Key, 100), 0)
		_, err = h.GetSecurity(u.Key)
		check("GetSecurity with authority", err, 0)
		check("Instantiate", h.Instantiate(u.Key, []byte("v"), 0), 0)
		// The used authorisation overrides nothing any more.
		_, err = h.Describe(u.Key)
		check("Describe after instantiating", err, EACCES)
		check("SetTimeout after instantiating", h.SetTimeout(u.Key, 0), EACCES)
		return nil
	})))
	c = e.caller(1000, 1000)
	stranger = e.caller(1000, 1000) // same user, other session
	reqSession = must(c.GetKeyringID(SessionKeyring, false))(t)
	secret = must(c.AddKey("user", "secret", []byte("s3cret"), SessionKeyring))(t)
	id := must(c.RequestKey("user", "wanted", []byte("x"), 0))(t)
	// The timeout the helper set applies: once it passes, the key is
	// ignored and constructed anew.
	e.clock.advance(101 * time.Second)
	id2 := must(c.RequestKey("user", "wanted", []byte("x"), 0))(t)
	if id2 == id || rec.count() != 2 {
		t.Fatalf("after the helper's timeout: key %d (was %d), %d upcalls", id2, id, rec.count())
	}
}

// TestNestedRequest has a helper request another key: it goes to the
// original requestor's destination, and the inner helper acts for the
// original requestor.
func TestNestedRequest(t *testing.T) {
	var c *Caller
	var dest, secret Serial
	var inner Upcall
	var rec upcalls
	e := newEnv(t, WithUpcall(rec.helper(t, func(_ context.Context, u *Upcall, h *Caller, _ int) error {
		switch u.Description {
		case "outer":
			id, err := h.RequestKey("user", "inner", []byte("y"), 0)
			if err != nil {
				t.Errorf("nested RequestKey: %v", err)
			}
			// This helper runs on the upcall's goroutine, where the
			// test may not stop (Fatal): it reports and goes on.
			if ids, err := ringSerials(c, dest); err != nil {
				t.Errorf("listing the requestor's destination: %v", err)
			} else if !slices.Contains(ids, id) {
				t.Errorf("inner key not in the requestor's destination")
			}
			return h.Instantiate(u.Key, []byte("outer"), 0)
		case "inner":
			inner = *u
			// The inner helper acts for the original requestor.
			if got, err := h.Search(SessionKeyring, "user", "secret", 0); !errors.Is(err, ENOKEY) {
				t.Errorf("inner helper's own session search = %d, %v", got, err)
			}
			if got, err := h.RequestKey("user", "secret", nil, 0); err != nil || got != secret {
				t.Errorf("inner helper RequestKey of the requestor's key = %d, %v", got, err)
			}
			return h.Instantiate(u.Key, []byte("inner"), 0)
		}
		return nil
	})))
	c = e.caller(1000, 1000)
	secret = must(c.AddKey("user", "secret", []byte("s"), SessionKeyring))(t)
	dest = must(c.AddKey("keyring", "dest", nil, SessionKeyring))(t)
	must(c.RequestKey("user", "outer", []byte("x"), dest))(t)
	if rec.count() != 2 {
		t.Fatalf("%d upcalls, want 2", rec.count())
	}
	// The inner upcall names the outer helper's keyrings, as the kernel
	// passes those of the process that asked.
	if inner.Thread != 0 || inner.Process != 0 || inner.Session == must(c.GetKeyringID(SessionKeyring, false))(t) {
		t.Fatalf("inner upcall keyrings %d %d %d", inner.Thread, inner.Process, inner.Session)
	}
}

func TestSetReqKeyKeyring(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	steps := []struct {
		set, old int
		err      Errno
	}{
		{ReqKeyNoChange, ReqKeyDefault, 0},
		{ReqKeySession, ReqKeyDefault, 0},
		{ReqKeyNoChange, ReqKeySession, 0},
		{ReqKeyGroup, 0, EINVAL},
		{99, 0, EINVAL},
		{-2, 0, EINVAL},
		{ReqKeyUser, ReqKeySession, 0},
		{ReqKeyUserSession, ReqKeyUser, 0},
		{ReqKeyRequestor, ReqKeyUserSession, 0},
		{ReqKeyThread, ReqKeyRequestor, 0},
		{ReqKeyProcess, ReqKeyThread, 0},
		{ReqKeyDefault, ReqKeyProcess, 0},
		{ReqKeyNoChange, ReqKeyDefault, 0},
	}
	for _, s := range steps {
		old, err := c.SetReqKeyKeyring(s.set)
		if !errnoIs(err, s.err) || (err == nil && old != s.old) {
			t.Fatalf("SetReqKeyKeyring(%d) = %d, %v; want %d, %v", s.set, old, err, s.old, s.err)
		}
	}
	// Setting thread or process creates that keyring.
	must(c.GetKeyringID(ThreadKeyring, false))(t)
	must(c.GetKeyringID(ProcessKeyring, false))(t)
}

// TestConstructDestination checks where a constructed key goes without an
// explicit destination, for each request-key default.
func TestConstructDestination(t *testing.T) {
	cases := []struct {
		name    string
		session bool // whether the caller has a session keyring
		setup   func(t *testing.T, c *Caller)
		jit     int
		want    Serial // special id of the keyring that must hold the key
	}{
		{"default", true, nil, ReqKeyDefault, SessionKeyring},
		{"default with a process keyring", true, func(t *testing.T, c *Caller) { must(c.GetKeyringID(ProcessKeyring, true))(t) }, ReqKeyDefault, ProcessKeyring},
		{"default with a thread keyring", true, func(t *testing.T, c *Caller) {
			must(c.GetKeyringID(ProcessKeyring, true))(t)
			must(c.GetKeyringID(ThreadKeyring, true))(t)
		}, ReqKeyDefault, ThreadKeyring},
		{"default without a session", false, nil, ReqKeyDefault, UserSessionKeyring},
		{"thread", true, nil, ReqKeyThread, ThreadKeyring},
		{"process", true, nil, ReqKeyProcess, ProcessKeyring},
		{"session", true, nil, ReqKeySession, SessionKeyring},
		{"session with a thread keyring", true, func(t *testing.T, c *Caller) { must(c.GetKeyringID(ThreadKeyring, true))(t) }, ReqKeySession, SessionKeyring},
		{"session without a session", false, nil, ReqKeySession, UserSessionKeyring},
		{"user", true, nil, ReqKeyUser, UserKeyring},
		{"user session", true, nil, ReqKeyUserSession, UserSessionKeyring},
		{"requestor without authority", true, nil, ReqKeyRequestor, SessionKeyring},
	}
	specials := []Serial{ThreadKeyring, ProcessKeyring, SessionKeyring, UserKeyring, UserSessionKeyring}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rec upcalls
			e := newEnv(t, WithUpcall(rec.helper(t, instantiateWith(t, "v"))))
			c := e.s.NewCaller(Cred{UID: 1000, GID: 1000, PID: 99})
			t.Cleanup(c.Release)
			if tc.session {
				must(c.JoinSessionKeyring(nil))(t)
			}
			if tc.setup != nil {
				tc.setup(t, c)
			}
			if _, err := c.SetReqKeyKeyring(tc.jit); err != nil {
				t.Fatal(err)
			}
			id := must(c.RequestKey("user", "k", []byte("x"), 0))(t)
			wantRing := must(c.GetKeyringID(tc.want, false))(t)
			for _, sp := range specials {
				ring, err := c.GetKeyringID(sp, false)
				if err != nil {
					continue // no such keyring: it holds nothing
				}
				if got, want := linked(t, c, ring, id), ring == wantRing; got != want {
					t.Errorf("keyring %d (%d) holds the key: %v, want %v", sp, ring, got, want)
				}
			}
		})
	}
	t.Run("destination not writable", func(t *testing.T) {
		var rec upcalls
		e := newEnv(t, WithUpcall(rec.helper(t, instantiateWith(t, "v"))))
		c := e.caller(1000, 1000)
		if err := c.SetPerm(SessionKeyring, (All&^Write)<<PossessorShift|View<<UserShift); err != nil {
			t.Fatal(err)
		}
		_, err := c.RequestKey("user", "k", []byte("x"), 0)
		wantErr(t, "RequestKey into a read-only session", err, EACCES)
		if rec.count() != 0 {
			t.Fatal("upcall made without a destination")
		}
	})
}

// TestConcurrentRequests has several goroutines request the same missing
// key: one upcall serves them all.
func TestConcurrentRequests(t *testing.T) {
	const n = 8
	cases := []struct {
		name string
		act  func(u *Upcall, h *Caller) error
		want Errno
	}{
		{"instantiate", func(u *Upcall, h *Caller) error { return h.Instantiate(u.Key, []byte("v"), 0) }, 0},
		{"reject", func(u *Upcall, h *Caller) error { return h.Reject(u.Key, 30, EKEYREJECTED, 0) }, EKEYREJECTED},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var entered atomic.Int32
			var rec upcalls
			e := newEnv(t, WithUpcall(rec.helper(t, func(_ context.Context, u *Upcall, h *Caller, _ int) error {
				// Give the other requesters a chance to pile up on the key
				// under construction (they are correct either way).
				for i := 0; i < 100 && entered.Load() < n; i++ {
					time.Sleep(time.Millisecond)
				}
				return tc.act(u, h)
			})))
			c := e.caller(1000, 1000)
			var wg sync.WaitGroup
			ids := make([]Serial, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					entered.Add(1)
					ids[i], errs[i] = c.RequestKey("user", "shared", []byte("x"), 0)
				})
			}
			wg.Wait()
			if rec.count() != 1 {
				t.Fatalf("%d upcalls, want 1", rec.count())
			}
			for i := range n {
				if !errnoIs(errs[i], tc.want) {
					t.Fatalf("requester %d: %v, want %v", i, errs[i], tc.want)
				}
				if tc.want == 0 && ids[i] != rec.last().Key {
					t.Fatalf("requester %d got %d, want %d", i, ids[i], rec.last().Key)
				}
			}
		})
	}
}
