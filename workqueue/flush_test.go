package workqueue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestFlushWaitsForEarlierItems(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(2))
	b := newBlocker()
	var c counter
	q.Schedule(NewWork("earlier", b.run))
	q.Schedule(NewWork("queued", c.run))
	done := make(chan error)
	go func() { done <- q.Flush(context.Background()) }()
	stillBlocked(t, "Flush with an earlier item running", done)
	b.open()
	if err := receive(t, "Flush", done); err != nil {
		t.Fatal(err)
	}
	if c.get() != 1 {
		t.Fatal("Flush returned before an earlier queued item ran")
	}
}

func TestFlushIgnoresLaterItems(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(2))
	early, late := newBlocker(), newBlocker()
	q.Schedule(NewWork("early", early.run))
	receive(t, "the early item", early.started)
	done := make(chan error)
	go func() { done <- q.Flush(context.Background()) }()
	// Flush is waiting, so it has taken its generation: anything queued
	// now is later than the flush.
	stillBlocked(t, "Flush with an earlier item running", done)
	q.Schedule(NewWork("late", late.run))
	receive(t, "the late item to start", late.started)
	early.open()
	if err := receive(t, "Flush while a later item runs", done); err != nil {
		t.Fatal(err)
	}
	late.open()
}

func TestFlushIgnoresDelayedItems(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	var c counter
	w := NewWork("later", c.run)
	q.ScheduleAfter(w, time.Hour)
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.get() != 0 || !w.Pending() {
		t.Fatal("Flush ran or dropped a delayed item")
	}
	q.Cancel(w)
}

func TestFlushWaitsForRequeuedInstance(t *testing.T) {
	// An item scheduled while it runs is runnable, behind its run: Flush
	// waits for the second run too.
	q, _ := newQueue(t, WithWorkers(2))
	b := newBlocker()
	var c counter
	first := true
	w := NewWork("twice", func() {
		if first {
			first = false
			b.run()
			return
		}
		c.run()
	})
	q.Schedule(w)
	receive(t, "the first run", b.started)
	q.Schedule(w)
	done := make(chan error)
	go func() { done <- q.Flush(context.Background()) }()
	stillBlocked(t, "Flush", done)
	b.open()
	if err := receive(t, "Flush", done); err != nil {
		t.Fatal(err)
	}
	if c.get() != 1 {
		t.Fatal("Flush returned before the instance queued behind the run ran")
	}
}

func TestFlushContext(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	b := newBlocker()
	q.Schedule(NewWork("stuck", b.run))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := q.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush = %v, want DeadlineExceeded", err)
	}
	b.open()
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestFlushWork(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(2))
	ctx := context.Background()

	t.Run("idle", func(t *testing.T) {
		w := NewWork("idle", func() {})
		if waited, err := q.FlushWork(ctx, w); waited || err != nil {
			t.Fatalf("FlushWork of an idle item = %v, %v", waited, err)
		}
	})
	t.Run("delayed", func(t *testing.T) {
		var c counter
		w := NewWork("delayed", c.run)
		q.ScheduleAfter(w, time.Hour)
		if waited, err := q.FlushWork(ctx, w); !waited || err != nil {
			t.Fatalf("FlushWork of a delayed item = %v, %v", waited, err)
		}
		if c.get() != 1 || w.Pending() {
			t.Fatal("FlushWork returned before the delayed item ran")
		}
	})
	t.Run("running", func(t *testing.T) {
		b := newBlocker()
		var c counter
		first := true
		w := NewWork("running", func() {
			if first {
				first = false
				b.run()
				return
			}
			c.run()
		})
		q.Schedule(w)
		receive(t, "the run", b.started)
		q.Schedule(w) // pending behind the run: FlushWork waits for both
		done := make(chan bool)
		go func() {
			waited, _ := q.FlushWork(ctx, w)
			done <- waited
		}()
		stillBlocked(t, "FlushWork of a running item", done)
		b.open()
		if !receive(t, "FlushWork", done) {
			t.Fatal("FlushWork of a running item returned false")
		}
		if c.get() != 1 {
			t.Fatal("FlushWork returned before the pending instance ran")
		}
	})
	t.Run("context", func(t *testing.T) {
		b := newBlocker()
		w := NewWork("stuck", b.run)
		q.Schedule(w)
		receive(t, "the run", b.started)
		short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		if waited, err := q.FlushWork(short, w); !waited || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("FlushWork = %v, %v; want true, DeadlineExceeded", waited, err)
		}
		b.open()
	})
}

func TestFlushFromItemPanics(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	msgs := make(chan string, 2)
	var w *Work
	w = NewWork("self-flush", func() {
		func() {
			defer func() { msgs <- panicText(recover()) }()
			_ = q.Flush(context.Background())
		}()
		func() {
			defer func() { msgs <- panicText(recover()) }()
			_, _ = q.FlushWork(context.Background(), w)
		}()
	})
	q.Schedule(w)
	if m := receive(t, "Flush panic", msgs); !strings.Contains(m, "wait for itself") {
		t.Fatalf("Flush from an item: panic %q", m)
	}
	if m := receive(t, "FlushWork panic", msgs); !strings.Contains(m, "its own function") {
		t.Fatalf("FlushWork from the item itself: panic %q", m)
	}
}
