package keys

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock for expiry tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	t     *testing.T
	s     *Service
	clock *fakeClock
}

func newEnv(t *testing.T, opts ...Option) *env {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s := New(append([]Option{WithClock(clk.now)}, opts...)...)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return &env{t: t, s: s, clock: clk}
}

// caller returns a caller with a fresh anonymous session keyring.
func (e *env) caller(uid, gid uint32, groups ...uint32) *Caller {
	e.t.Helper()
	c := e.s.NewCaller(Cred{UID: uid, GID: gid, Groups: groups, PID: int(1000 + uid)})
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		e.t.Fatalf("join session: %v", err)
	}
	e.t.Cleanup(c.Release)
	return c
}

// settle waits until every destruction queued so far has run.
func (e *env) settle() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.s.WaitGC(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// fataler is the part of a test that must and noErr need. *testing.T
// and *testing.B are fatalers, and so is rapid's *T, which has no Helper.
type fataler interface {
	Fatalf(format string, args ...any)
}

// must returns v, or fails the test on err: must(c.AddKey(...))(t). It
// takes the test second, in a call of its own, because Go infers T only
// from all of a call's arguments, and a (v, err) pair can only be passed
// alone. It fails with Fatalf, not a panic, so that the test's cleanups
// and the goroutine-leak check still run; like Fatalf, it must be called
// from the test's own goroutine (an upcall helper, say, runs on another:
// report there with Errorf).
func must[T any](v T, err error) func(fataler) T {
	return func(t fataler) T {
		if h, ok := t.(interface{ Helper() }); ok {
			h.Helper()
		}
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

// noErr fails the test on err, as must does for calls that return only
// an error.
func noErr(t fataler, err error) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// itoa writes a serial as a restriction string names it.
func itoa(s Serial) string { return strconv.Itoa(int(s)) }

// ptr is the pointer RestrictKeyring takes for a string.
func ptr(s string) *string { return &s }

func wantErr(t *testing.T, what string, err error, want Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v (%d)", what, err, want, want)
	}
}
