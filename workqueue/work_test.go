package workqueue

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestScheduleTwiceBeforeRunRunsOnce(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	g := gate(t, q)
	var c counter
	w := NewWork("twice", c.run)
	if !q.Schedule(w) {
		t.Fatal("first Schedule returned false")
	}
	if q.Schedule(w) {
		t.Fatal("second Schedule of a pending item returned true")
	}
	if q.ScheduleAfter(w, time.Hour) {
		t.Fatal("ScheduleAfter of a pending item returned true")
	}
	if !w.Pending() {
		t.Fatal("item not pending before it ran")
	}
	g.open()
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := c.get(); n != 1 {
		t.Fatalf("item ran %d times, want 1", n)
	}
	if w.Pending() {
		t.Fatal("item still pending after it ran")
	}
	if s := q.Stats(); s.Rejected != 2 {
		t.Fatalf("Rejected = %d, want 2", s.Rejected)
	}
}

func TestScheduleWhileRunningRunsAgain(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(2))
	b := newBlocker()
	var runs atomic.Int64
	w := NewWork("again", func() {
		if runs.Add(1) == 1 {
			b.run()
		}
	})
	q.Schedule(w)
	receive(t, "the first run to start", b.started)
	if w.Pending() {
		t.Fatal("pending bit still set while running")
	}
	if !q.Schedule(w) {
		t.Fatal("Schedule while running returned false: the pending bit must clear before the run")
	}
	if q.Schedule(w) {
		t.Fatal("second Schedule while running returned true")
	}
	// The second worker is free, but the item must wait for its own run.
	time.Sleep(20 * time.Millisecond)
	if n := runs.Load(); n != 1 {
		t.Fatalf("item ran concurrently with itself (%d runs started)", n)
	}
	b.open()
	eventually(t, "the second run", func() bool { return runs.Load() == 2 })
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("item ran %d times, want 2", n)
	}
}

func TestNeverRunsConcurrentlyWithItself(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(4))
	const items, producers, schedules = 4, 4, 2000
	var inflight [items]atomic.Int32
	var runs [items]atomic.Int64
	var overlaps atomic.Int64
	works := make([]*Work, items)
	for i := range works {
		works[i] = NewWork("item", func() {
			if inflight[i].Add(1) != 1 {
				overlaps.Add(1)
			}
			runs[i].Add(1)
			for range 10 {
				runtime.Gosched()
			}
			inflight[i].Add(-1)
		})
	}
	var wg sync.WaitGroup
	var accepted atomic.Int64
	for p := range producers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(p), 1))
			for range schedules {
				if q.Schedule(works[r.IntN(items)]) {
					accepted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	q.Close()
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("an item ran concurrently with itself %d times", n)
	}
	var total int64
	for i := range runs {
		total += runs[i].Load()
	}
	if total != accepted.Load() {
		t.Fatalf("%d runs for %d accepted Schedules; every accepted Schedule must run exactly once", total, accepted.Load())
	}
	s := q.Stats()
	if s.Scheduled+s.Rejected != producers*schedules {
		t.Fatalf("Scheduled %d + Rejected %d != %d calls", s.Scheduled, s.Rejected, producers*schedules)
	}
}

func TestCancelWaitsForRunningInstance(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(2))
	b := newBlocker()
	w := NewWork("long", b.run)
	q.Schedule(w)
	receive(t, "the run to start", b.started)
	done := make(chan bool)
	go func() { done <- q.Cancel(w) }()
	stillBlocked(t, "Cancel of a running item", done)
	b.open()
	if was := receive(t, "Cancel", done); was {
		t.Fatal("Cancel returned true for an item that was running, not pending")
	}
}

func TestCancelPendingWhileRunning(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(2))
	b := newBlocker()
	var runs atomic.Int64
	w := NewWork("long", func() { runs.Add(1); b.run() })
	q.Schedule(w)
	receive(t, "the run to start", b.started)
	q.Schedule(w) // queued behind the run
	done := make(chan bool)
	go func() { done <- q.Cancel(w) }()
	stillBlocked(t, "Cancel of a running item", done)
	b.open()
	if !receive(t, "Cancel", done) {
		t.Fatal("Cancel returned false for an item scheduled while running")
	}
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("item ran %d times, want 1: the cancelled instance must not run", n)
	}
	if s := q.Stats(); s.Cancelled != 1 || s.Scheduled != 2 || s.Run != 1 {
		t.Fatalf("stats %+v, want Scheduled 2, Run 1, Cancelled 1", s)
	}
}

func TestCancelStopsSelfRequeueingItem(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(2))
	var runs atomic.Int64
	var w *Work
	w = NewWork("forever", func() {
		runs.Add(1)
		time.Sleep(100 * time.Microsecond)
		q.Schedule(w)
	})
	q.Schedule(w)
	eventually(t, "a few runs", func() bool { return runs.Load() > 5 })
	q.Cancel(w)
	if w.Pending() {
		t.Fatal("item pending after Cancel")
	}
	n := runs.Load()
	time.Sleep(20 * time.Millisecond)
	if m := runs.Load(); m != n {
		t.Fatalf("item ran %d more times after Cancel returned", m-n)
	}
	// Cancel is over: the item may be scheduled again.
	if !q.Schedule(w) {
		t.Fatal("Schedule after Cancel returned false")
	}
	q.Cancel(w)
}

func TestCancelIdleItem(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	w := NewWork("idle", func() {})
	if q.Cancel(w) {
		t.Fatal("Cancel of a never-scheduled item returned true")
	}
	q.Schedule(w)
	if _, err := q.FlushWork(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	if q.Cancel(w) {
		t.Fatal("Cancel of an item that has run returned true")
	}
}

func TestCancelFromItselfPanics(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	msg := make(chan string, 1)
	var w *Work
	w = NewWork("self-cancel", func() {
		defer func() { msg <- panicText(recover()) }()
		q.Cancel(w)
	})
	q.Schedule(w)
	if m := receive(t, "the item", msg); !strings.Contains(m, "its own function") {
		t.Fatalf("panic %q, want one about cancelling from its own function", m)
	}
}

func TestItemMovesBetweenQueuesOnlyWhenIdle(t *testing.T) {
	q1, d := newQueue(t, WithName("one"), WithWorkers(1))
	q2 := New(d, WithName("two"), WithWorkers(1))
	defer q2.Close()
	var c counter
	w := NewWork("mover", c.run)
	q1.ScheduleAfter(w, time.Hour)
	func() {
		defer func() {
			if m := panicText(recover()); !strings.Contains(m, "while pending or running on queue \"one\"") {
				t.Fatalf("panic %q, want one about the other queue", m)
			}
		}()
		q2.Schedule(w)
	}()
	if q2.Cancel(w) {
		t.Fatal("Cancel on a queue that does not own the item returned true")
	}
	if !q1.Cancel(w) {
		t.Fatal("Cancel on the owning queue returned false")
	}
	if !q2.Schedule(w) {
		t.Fatal("Schedule of an idle item on another queue returned false")
	}
	if _, err := q2.FlushWork(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	if c.get() != 1 {
		t.Fatalf("item ran %d times, want 1", c.get())
	}
}

func panicText(v any) string {
	if v == nil {
		return "<no panic>"
	}
	if s, ok := v.(string); ok {
		return s
	}
	if e, ok := v.(error); ok {
		return e.Error()
	}
	return "<non-string panic>"
}
