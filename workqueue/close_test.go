package workqueue

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCloseDrains(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	g := gate(t, q)

	var queued, delayed, chainedLater counter
	q.Schedule(NewWork("queued", queued.run))
	q.ScheduleAfter(NewWork("delayed", delayed.run), time.Hour)

	// A chain that schedules its own continuation, the last link with a
	// delay that Close must not wait out.
	var links atomic.Int64
	var chain *Work
	chain = NewWork("chain", func() {
		switch n := links.Add(1); {
		case n < 4:
			if !q.Schedule(chain) {
				t.Error("chained Schedule during the drain returned false")
			}
		case n == 4:
			if !q.ScheduleAfter(chain, time.Hour) {
				t.Error("chained ScheduleAfter during the drain returned false")
			}
		}
	})
	q.Schedule(chain)
	other := NewWork("chained-other", chainedLater.run)
	q.Schedule(NewWork("schedules-other", func() { q.Schedule(other) }))

	closed := make(chan struct{})
	go func() { q.Close(); close(closed) }()
	// While draining, outsiders are refused.
	eventually(t, "Close to begin", func() bool { return !q.Schedule(NewWork("outsider", func() {})) })
	stillBlocked(t, "Close with the gate item running", closed)
	g.open()
	receive(t, "Close", closed)

	if queued.get() != 1 || delayed.get() != 1 || chainedLater.get() != 1 {
		t.Fatalf("runs: queued %d, delayed %d, chained other %d; want 1 each",
			queued.get(), delayed.get(), chainedLater.get())
	}
	if n := links.Load(); n != 5 {
		t.Fatalf("chain ran %d links, want 5", n)
	}
	s := q.Stats()
	if s.Pending != 0 || s.Running != 0 || s.Scheduled != s.Run+s.Cancelled {
		t.Fatalf("after Close: %+v", s)
	}
}

func TestScheduleAfterCloseFails(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	q.Close()
	q.Close() // idempotent
	var c counter
	w := NewWork("late", c.run)
	if q.Schedule(w) || q.ScheduleAfter(w, time.Millisecond) || q.Reschedule(w, 0) {
		t.Fatal("scheduling on a closed queue succeeded")
	}
	if w.Pending() {
		t.Fatal("item pending on a closed queue")
	}
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if q.Cancel(w) {
		t.Fatal("Cancel on a closed queue returned true")
	}
}

func TestConcurrentClose(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(2))
	b := newBlocker()
	q.Schedule(NewWork("slow", b.run))
	done := make(chan struct{}, 2)
	for range 2 {
		go func() { q.Close(); done <- struct{}{} }()
	}
	stillBlocked(t, "Close", done)
	b.open()
	receive(t, "first Close", done)
	receive(t, "second Close", done)
}

func TestCloseFromItemPanics(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	msg := make(chan string, 1)
	q.Schedule(NewWork("closer", func() {
		defer func() { msg <- panicText(recover()) }()
		q.Close()
	}))
	if m := receive(t, "the item", msg); !strings.Contains(m, "wait for itself") {
		t.Fatalf("panic %q", m)
	}
}
