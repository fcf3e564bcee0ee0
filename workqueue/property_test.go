package workqueue

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ukeys/ukeys/rcu"
	"pgregory.net/rapid"
)

// propItem is one item of the property test with what the test knows
// about it. The atomics are written by the item's runs; the plain fields
// only by the test goroutine.
type propItem struct {
	w        *Work
	inflight atomic.Int32
	overlap  atomic.Bool
	runs     atomic.Int64
	lastRun  atomic.Int64 // clock value at the start of the last run

	created    int64 // instances created by calls that reported so
	cancelled  int64 // Cancel calls that returned true
	lastCreate int64 // clock value just before the last creating call
	lastCancel int64 // clock value just after the last successful Cancel
}

// TestProperties drives a queue with random operations on a few items and
// checks the invariants that must survive any interleaving: an item never
// runs concurrently with itself; every instance created is consumed by
// exactly one run or one successful Cancel, the last one after it was
// created; Cancel leaves the item idle; Close leaves nothing pending.
func TestProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		d := rcu.New(rcu.WithName("prop"))
		defer func() { _ = d.Close() }()
		q := New(d, WithWorkers(rapid.IntRange(1, 3).Draw(rt, "workers")), WithWatchdog(0))
		closed := false
		defer func() {
			if !closed {
				q.Close()
			}
		}()

		var clock atomic.Int64
		items := make([]*propItem, rapid.IntRange(1, 4).Draw(rt, "items"))
		for i := range items {
			it := &propItem{}
			sleep := time.Duration(rapid.IntRange(0, 100).Draw(rt, "runMicros")) * time.Microsecond
			it.w = NewWork("prop", func() {
				if it.inflight.Add(1) != 1 {
					it.overlap.Store(true)
				}
				it.lastRun.Store(clock.Add(1))
				it.runs.Add(1)
				if sleep > 0 {
					time.Sleep(sleep)
				}
				it.inflight.Add(-1)
			})
			items[i] = it
		}
		delay := func() time.Duration {
			return time.Duration(rapid.IntRange(0, 500).Draw(rt, "delayMicros")) * time.Microsecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()

		ops := rapid.IntRange(1, 30).Draw(rt, "ops")
		for range ops {
			it := rapid.SampledFrom(items).Draw(rt, "item")
			switch op := rapid.SampledFrom([]string{"Schedule", "ScheduleAfter", "Reschedule", "Cancel", "Flush", "FlushWork", "Sleep"}).Draw(rt, "op"); op {
			case "Schedule":
				at := clock.Add(1)
				if q.Schedule(it.w) {
					it.created++
					it.lastCreate = at
				}
			case "ScheduleAfter":
				at := clock.Add(1)
				if q.ScheduleAfter(it.w, delay()) {
					it.created++
					it.lastCreate = at
				}
			case "Reschedule":
				at := clock.Add(1)
				if !q.Reschedule(it.w, delay()) {
					// Not pending before, so it made a new instance (the
					// queue is open and no Cancel runs concurrently).
					it.created++
					it.lastCreate = at
				}
			case "Cancel":
				if q.Cancel(it.w) {
					it.cancelled++
					it.lastCancel = clock.Add(1)
				}
				if it.w.Pending() || it.inflight.Load() != 0 {
					rt.Fatalf("item pending or running after Cancel returned")
				}
			case "Flush":
				if err := q.Flush(ctx); err != nil {
					rt.Fatalf("Flush: %v", err)
				}
			case "FlushWork":
				if _, err := q.FlushWork(ctx, it.w); err != nil {
					rt.Fatalf("FlushWork: %v", err)
				}
			case "Sleep":
				time.Sleep(delay())
			}
		}
		q.Close()
		closed = true

		var created, cancelled, runs int64
		for i, it := range items {
			if it.overlap.Load() {
				rt.Fatalf("item %d ran concurrently with itself", i)
			}
			if it.w.Pending() {
				rt.Fatalf("item %d pending after Close", i)
			}
			if got := it.runs.Load() + it.cancelled; got != it.created {
				rt.Fatalf("item %d: %d instances created, but %d runs + %d cancels", i, it.created, it.runs.Load(), it.cancelled)
			}
			if it.created > 0 && it.lastRun.Load() < it.lastCreate && it.lastCancel < it.lastCreate {
				rt.Fatalf("item %d: its last instance was neither run nor cancelled after it was created", i)
			}
			created += it.created
			cancelled += it.cancelled
			runs += it.runs.Load()
		}
		s := q.Stats()
		if s.Scheduled != uint64(created) || s.Cancelled != uint64(cancelled) || s.Run != uint64(runs) ||
			s.Pending != 0 || s.Running != 0 || s.RunTime.Count != runs {
			rt.Fatalf("stats %+v; want Scheduled %d, Cancelled %d, Run %d", s, created, cancelled, runs)
		}
	})
}
