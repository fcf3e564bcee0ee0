package rcu

import (
	"github.com/ukeys/ukeys/internal/testutil"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, what, cond)
}

func stillBlocked[T any](t testing.TB, what string, ch <-chan T) {
	t.Helper()
	testutil.StillBlocked(t, what, ch)
}

func newDomain(t testing.TB, opts ...Option) *Domain {
	t.Helper()
	d := New(opts...)
	t.Cleanup(func() { _ = d.Close() })
	return d
}
