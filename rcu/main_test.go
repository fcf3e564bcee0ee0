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

// receive waits for a value from ch and fails the test after a generous
// limit instead of hanging until the whole binary's -timeout: what names
// the awaited event in the failure.
func receive[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	return testutil.Recv(t, what, ch)
}

func newDomain(t testing.TB, opts ...Option) *Domain {
	t.Helper()
	d := New(opts...)
	t.Cleanup(func() { _ = d.Close() })
	return d
}
