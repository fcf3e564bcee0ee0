package bigkey

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ukeys/ukeys/keys"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newService returns a service closed when the test ends.
func newService(t *testing.T, opts ...keys.Option) *keys.Service {
	t.Helper()
	s := keys.New(opts...)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// caller returns a caller of s with a fresh anonymous session keyring.
func caller(t *testing.T, s *keys.Service, uid, gid uint32) *keys.Caller {
	t.Helper()
	c := s.NewCaller(keys.Cred{UID: uid, GID: gid, PID: int(1000 + uid)})
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatalf("join session: %v", err)
	}
	t.Cleanup(c.Release)
	return c
}

// settle waits until every destruction queued so far has run.
func settle(t *testing.T, s *keys.Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitGC(ctx); err != nil {
		t.Fatal(err)
	}
}

// must returns v, or fails the test on err: must(c.AddKey(...))(t).
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

// wantErr fails the test unless err is want.
func wantErr(t *testing.T, what string, err error, want keys.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

// sealedBy runs add and returns the sealed store of the big_key it made.
func sealedBy(t *testing.T, add func()) *sealed {
	t.Helper()
	var made *sealed
	orig := bigKeyType.PreparseFor
	bigKeyType.PreparseFor = func(data []byte, acct keys.Account) (*keys.Payload, int, error) {
		p, n, err := orig(data, acct)
		if err == nil {
			made, _ = p.Extra.(*sealed)
		}
		return p, n, err
	}
	defer func() { bigKeyType.PreparseFor = orig }()
	add()
	if made == nil {
		t.Fatal("the big_key is not sealed in a file")
	}
	return made
}
