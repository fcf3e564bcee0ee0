package workqueue

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/rcu"
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

// receive waits for a value on ch, failing the test after a generous limit.
func receive[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	return testutil.Recv(t, what, ch)
}

// newQueue returns a queue on a fresh domain; both are closed when the
// test ends, the queue first.
func newQueue(t testing.TB, opts ...Option) (*Queue, *rcu.Domain) {
	t.Helper()
	d := rcu.New(rcu.WithName("test"))
	q := New(d, opts...)
	t.Cleanup(func() {
		q.Close()
		_ = d.Close()
	})
	return q, d
}

// blocker is an item body that announces each run and blocks until
// released. Its method name shows up in watchdog stacks.
type blocker struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (b *blocker) run() {
	b.started <- struct{}{}
	<-b.release
}

func (b *blocker) open() { b.once.Do(func() { close(b.release) }) }

// gate occupies a queue's only worker until released, so that tests can
// line items up behind it.
func gate(t testing.TB, q *Queue) *blocker {
	t.Helper()
	b := newBlocker()
	if !q.Schedule(NewWork("gate", b.run)) {
		t.Fatal("Schedule of the gate returned false")
	}
	receive(t, "the gate to start", b.started)
	t.Cleanup(b.open)
	return b
}

// counter is an item body that counts its runs.
type counter struct{ n atomic.Int64 }

func (c *counter) run()       { c.n.Add(1) }
func (c *counter) get() int64 { return c.n.Load() }
