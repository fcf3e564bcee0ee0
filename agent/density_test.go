package agent

import (
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
)

// idleCost makes n idle namespaces as the agent makes them and returns
// the heap bytes and goroutines each holds, and what ends them.
func idleCost(t testing.TB, a *Agent, n int) (heap, goroutines float64, end func()) {
	t.Helper()
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

// TestIdleNamespaceCost reports what an idle namespace costs; with
// UKEYS_DENSITY_PROFILE set it writes a heap profile there.
func TestIdleNamespaceCost(t *testing.T) {
	a := New(Config{})
	defer a.Shutdown(t.Context())
	const n = 1000
	heap, gs, end := idleCost(t, a, n)
	if p := os.Getenv("UKEYS_DENSITY_PROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}
	t.Logf("%d idle namespaces: %.1f KiB of heap and %.2f goroutines each", n, heap/1024, gs)
	end()
}
