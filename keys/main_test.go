package keys

import (
	"context"
	"errors"
	"fmt"
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

// must returns v, or panics (failing the test with a stack) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("unexpected error: %v", err))
	}
	return v
}

func wantErr(t *testing.T, what string, err error, want Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v (%d)", what, err, want, want)
	}
}
