package rcu

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// The benchmarks below back the figures in docs/figures.md. Each one that has a
// natural baseline runs it in the same invocation (RWMutex beside read
// sections), so that ratios survive a noisy machine.

func BenchmarkCheckpoint(b *testing.B) {
	d := newDomain(b)
	t := d.Register("bench")
	defer t.Unregister()
	for b.Loop() {
		t.Checkpoint()
	}
}

func BenchmarkQuiescent(b *testing.B) {
	d := newDomain(b)
	t := d.Register("bench")
	defer t.Unregister()
	for b.Loop() {
		t.Quiescent()
	}
}

func BenchmarkRead(b *testing.B) {
	d := newDomain(b)
	for b.Loop() {
		s := d.Read()
		s.End()
	}
}

func BenchmarkRWMutexRLock(b *testing.B) {
	var mu sync.RWMutex
	for b.Loop() {
		mu.RLock()
		mu.RUnlock()
	}
}

func BenchmarkReadParallel(b *testing.B) {
	d := newDomain(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s := d.Read()
			s.End()
		}
	})
}

func BenchmarkRWMutexRLockParallel(b *testing.B) {
	var mu sync.RWMutex
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.RLock()
			mu.RUnlock()
		}
	})
}

// latencies records per-operation durations and reports p50/p99 as
// benchmark metrics next to ns/op.
type latencies struct{ h *hdrhistogram.Histogram }

func newLatencies() latencies { return latencies{hdrhistogram.New(1, int64(10*time.Second), 3)} }

func (l latencies) record(d time.Duration) { _ = l.h.RecordValue(d.Nanoseconds()) }

func (l latencies) report(b *testing.B) {
	b.ReportMetric(float64(l.h.ValueAtQuantile(50))/1e3, "p50-µs")
	b.ReportMetric(float64(l.h.ValueAtQuantile(99))/1e3, "p99-µs")
	b.ReportMetric(float64(l.h.Max())/1e3, "max-µs")
}

func BenchmarkSynchronizeIdle(b *testing.B) {
	d := newDomain(b)
	t := d.Register("offline-task") // every task offline
	t.Offline()
	defer t.Unregister()
	lat := newLatencies()
	ctx := context.Background()
	for b.Loop() {
		start := time.Now()
		if err := d.Synchronize(ctx); err != nil {
			b.Fatal(err)
		}
		lat.record(time.Since(start))
	}
	lat.report(b)
}

// busyTasks starts n registered tasks that compute in a loop and
// checkpoint about every interval, as a server's workers would.
func busyTasks(d *Domain, n int, interval time.Duration) (stop func()) {
	var quit atomic.Bool
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := d.Register(fmt.Sprintf("busy-%d", i))
			defer t.Unregister()
			for !quit.Load() {
				start := time.Now()
				for time.Since(start) < interval {
				}
				t.Checkpoint()
			}
		}()
	}
	return func() { quit.Store(true); wg.Wait() }
}

func BenchmarkSynchronizeBusyTasks(b *testing.B) {
	for _, n := range []int{2, 64} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			d := newDomain(b)
			stop := busyTasks(d, n, 10*time.Microsecond)
			defer stop()
			lat := newLatencies()
			ctx := context.Background()
			for b.Loop() {
				start := time.Now()
				if err := d.Synchronize(ctx); err != nil {
					b.Fatal(err)
				}
				lat.record(time.Since(start))
			}
			lat.report(b)
		})
	}
}

// 100 callers call Synchronize at once; the metrics are how many grace
// periods they caused between them (never 100) and how long the whole round
// took. On an idle domain a grace period takes well under a microsecond, so
// callers that the scheduler starts one after another each find the domain
// idle and finish before the next arrives: there is nothing to share. With
// busy tasks a grace period lasts long enough for callers to overlap, and
// they share. The round's duration is then set by the Go scheduler, which
// lets a CPU-bound goroutine run for up to 10 ms before preempting it, so
// that woken callers wait for a processor.
func BenchmarkSynchronizeConcurrent100(b *testing.B) {
	for _, tasks := range []int{0, 2} {
		b.Run(fmt.Sprintf("busy-tasks=%d", tasks), func(b *testing.B) {
			d := newDomain(b)
			if tasks > 0 {
				defer busyTasks(d, tasks, 10*time.Microsecond)()
			}
			const callers = 100
			ctx := context.Background()
			var gps uint64
			lat := newLatencies()
			for b.Loop() {
				before := d.Stats().GracePeriods
				var wg, ready sync.WaitGroup
				startGate := make(chan struct{})
				for range callers {
					wg.Add(1)
					ready.Add(1)
					go func() {
						defer wg.Done()
						ready.Done()
						<-startGate
						if err := d.Synchronize(ctx); err != nil {
							b.Error(err)
						}
					}()
				}
				ready.Wait()
				start := time.Now()
				close(startGate)
				wg.Wait()
				lat.record(time.Since(start))
				gps += d.Stats().GracePeriods - before
			}
			b.ReportMetric(float64(gps)/float64(b.N), "gps/round")
			lat.report(b)
		})
	}
}

func BenchmarkCall(b *testing.B) {
	d := newDomain(b)
	var n atomic.Int64
	fn := func() { n.Add(1) }
	start := time.Now()
	for b.Loop() {
		d.Call(fn)
	}
	if err := d.Barrier(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds()/1e6, "Mcalls/s")
	if st := d.Stats(); st.CallbackBacklog != 0 {
		b.Fatalf("backlog %d after Barrier", st.CallbackBacklog)
	}
}

func BenchmarkCallParallel(b *testing.B) {
	d := newDomain(b)
	var n atomic.Int64
	fn := func() { n.Add(1) }
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d.Call(fn)
		}
	})
	if err := d.Barrier(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds()/1e6, "Mcalls/s")
}
