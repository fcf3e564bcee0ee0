package agent

import (
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ukeys/ukeys/internal/container"
	"github.com/ukeys/ukeys/keys"
)

// idleCost makes n idle namespaces as the agent makes them and returns
// the heap bytes and goroutines each holds, and what ends them.
func idleCost(a *Agent, n int) (heap, goroutines float64, end func()) {
	before, g0 := heapNow(), runtime.NumGoroutine()
	end = a.IdleNamespaces(n)
	after, g1 := heapNow(), runtime.NumGoroutine()
	return float64(int64(after)-int64(before)) / float64(n), float64(g1-g0) / float64(n), end
}

// heapNow is the heap in use once a collection has run.
func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Bounds of what an idle key namespace may cost (issue 36: a node of
// hundreds of pods holds hundreds of them): 64 KiB of heap and no
// goroutine of its own. Each was a whole keys.Service with its rcu
// domain and collector's queue, and their histograms: 1,206.6 KiB and
// 5 goroutines.
const (
	maxIdleHeap       = 64 << 10
	idleNamespacesRun = 1000
	// maxUsedHeap bounds a namespace whose container added a key and
	// dropped it, reaped: its keyrings and the collector's statistics
	// (whose histograms alone were some 600 KiB once made).
	maxUsedHeap = 128 << 10
)

// An idle namespace costs at most maxIdleHeap and no goroutine, over
// enough of them that the heap's noise is a few bytes each; and ending
// them gives the heap back and leaves no goroutine behind, the commons'
// included. With UKEYS_DENSITY_PROFILE set it writes a heap profile of
// the namespaces there.
func TestIdleNamespaceCost(t *testing.T) {
	before, base := goleak.IgnoreCurrent(), heapNow()
	a := New(Config{})
	defer a.Shutdown(t.Context())
	// The first namespace makes the commons every namespace shares: the
	// agent's, whatever the count.
	first := a.IdleNamespaces(1)
	heap, gs, end := idleCost(a, idleNamespacesRun)
	if p := os.Getenv("UKEYS_DENSITY_PROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	t.Logf("%d idle namespaces: %.1f KiB of heap and %.3f goroutines each", idleNamespacesRun, heap/1024, gs)
	if heap > maxIdleHeap {
		t.Errorf("an idle namespace holds %.1f KiB of heap; at most %d KiB", heap/1024, maxIdleHeap>>10)
	}
	if gs != 0 {
		t.Errorf("an idle namespace has %.3f goroutines of its own; want none", gs)
	}
	end()
	first()
	// Every goroutine made since the test began is gone: no namespace's,
	// nor the commons'.
	if err := goleak.Find(before); err != nil {
		t.Errorf("ended namespaces left goroutines: %v", err)
	}
	left := float64(int64(heapNow())-int64(base)) / float64(idleNamespacesRun)
	t.Logf("once ended: %.3f KiB each left of the heap", left/1024)
	if left > 1024 {
		t.Errorf("ended namespaces left %.2f KiB each of the heap; want none", left/1024)
	}
}

// A namespace whose container has used its keys (joined a session,
// added a key and invalidated it, which the collector reaped) and gone
// idle costs at most maxUsedHeap, and no goroutine once its clock and
// collector are quiet.
func TestUsedNamespaceCost(t *testing.T) {
	a := New(Config{})
	defer a.Shutdown(t.Context())
	first := a.IdleNamespaces(1)
	defer first()
	const n = 200
	h0, g0 := heapNow(), runtime.NumGoroutine()
	nss := make([]*namespace, n)
	a.mu.Lock()
	for i := range nss {
		nss[i] = a.newNamespace("", container.Pod{})
	}
	a.mu.Unlock()
	defer func() {
		for _, ns := range nss {
			ns.end()
		}
	}()
	for _, ns := range nss {
		c := ns.svc.NewCaller(keys.Cred{PID: 4242})
		if _, err := c.JoinSessionKeyring(nil); err != nil {
			t.Fatal(err)
		}
		id, err := c.AddKey("user", "krb5cc", []byte("ticket"), keys.SessionKeyring)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Invalidate(id); err != nil {
			t.Fatal(err)
		}
		c.Release()
		if err := ns.svc.WaitGC(t.Context()); err != nil {
			t.Fatal(err)
		}
		if st := ns.svc.GCStats(); st.Items == 0 {
			t.Fatal("the collector ran no item")
		}
	}
	// The coarse clock's goroutine stops a tick after its last reader.
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > g0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	heap, gs := float64(int64(heapNow())-int64(h0))/n, runtime.NumGoroutine()-g0
	t.Logf("%d namespaces used and idle: %.1f KiB of heap each, %d goroutines", n, heap/1024, gs)
	if heap > maxUsedHeap {
		t.Errorf("a namespace used and idle holds %.1f KiB of heap; at most %d KiB", heap/1024, maxUsedHeap>>10)
	}
	if gs > 0 {
		t.Errorf("%d namespaces used and idle keep %d goroutines; want none", n, gs)
	}
}
