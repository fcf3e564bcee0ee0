package workqueue

import (
	"context"
	"testing"
	"time"
)

func TestScheduleAfterRunsAfterDelay(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(2))
	const delay = 30 * time.Millisecond
	ran := make(chan time.Time, 1)
	w := NewWork("delayed", func() { ran <- time.Now() })
	start := time.Now()
	if !q.ScheduleAfter(w, delay) {
		t.Fatal("ScheduleAfter returned false")
	}
	if !w.Pending() {
		t.Fatal("delayed item not pending")
	}
	if q.ScheduleAfter(w, time.Millisecond) || q.Schedule(w) {
		t.Fatal("scheduling a delayed (pending) item again returned true")
	}
	at := receive(t, "the delayed run", ran)
	if got := at.Sub(start); got < delay {
		t.Fatalf("item ran after %v, before its delay of %v", got, delay)
	}
	// The run is recorded in both histograms.
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the run to be recorded", func() bool { return q.Stats().Wait.Count == 1 })
}

func TestScheduleAfterZeroIsSchedule(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	var c counter
	w := NewWork("now", c.run)
	if !q.ScheduleAfter(w, 0) {
		t.Fatal("ScheduleAfter(0) returned false")
	}
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.get() != 1 {
		t.Fatal("ScheduleAfter(0) did not queue the item at once: Flush did not wait for it")
	}
}

func TestReschedulePullsDelayEarlier(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	ran := make(chan struct{}, 1)
	w := NewWork("pulled", func() { ran <- struct{}{} })
	q.ScheduleAfter(w, time.Hour)
	if !q.Reschedule(w, 0) {
		t.Fatal("Reschedule of a delayed item returned false")
	}
	receive(t, "the rescheduled run", ran)
	if w.Pending() {
		t.Fatal("item pending after it ran")
	}
}

func TestRescheduleReturnsWhetherPending(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	g := gate(t, q)
	var c counter
	w := NewWork("re", c.run)

	if q.Reschedule(w, time.Hour) {
		t.Fatal("Reschedule of an idle item returned true")
	}
	if !w.Pending() {
		t.Fatal("Reschedule of an idle item did not schedule it")
	}
	if !q.Reschedule(w, 2*time.Hour) {
		t.Fatal("Reschedule of a delayed item returned false")
	}
	if !q.Reschedule(w, 0) {
		t.Fatal("Reschedule(0) of a delayed item returned false")
	}
	if !q.Reschedule(w, 0) {
		t.Fatal("Reschedule(0) of a queued item returned false")
	}
	// Pushing a queued item back: it leaves the line and waits for its timer.
	if !q.Reschedule(w, time.Hour) {
		t.Fatal("Reschedule of a queued item returned false")
	}
	g.open()
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.get() != 0 || !w.Pending() {
		t.Fatalf("item pushed back by an hour ran (%d runs) or lost its pending bit", c.get())
	}
	if !q.Reschedule(w, 0) {
		t.Fatal("Reschedule of a delayed item returned false")
	}
	if _, err := q.FlushWork(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	if c.get() != 1 {
		t.Fatalf("item ran %d times, want 1", c.get())
	}
	if q.Reschedule(w, time.Hour) {
		t.Fatal("Reschedule after the run returned true")
	}
	if !q.Cancel(w) {
		t.Fatal("Cancel of the delayed item returned false")
	}
	if s := q.Stats(); s.Scheduled != 3 || s.Run != 2 || s.Cancelled != 1 || s.Pending != 0 {
		t.Fatalf("stats %+v, want Scheduled 3 (gate and two instances), Run 2, Cancelled 1", s)
	}
}

func TestCancelDelayedItem(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	var c counter
	w := NewWork("cancelled", c.run)
	q.ScheduleAfter(w, 20*time.Millisecond)
	if !q.Cancel(w) {
		t.Fatal("Cancel of a delayed item returned false")
	}
	if w.Pending() {
		t.Fatal("item pending after Cancel")
	}
	time.Sleep(60 * time.Millisecond)
	if c.get() != 0 {
		t.Fatal("cancelled delayed item ran")
	}
	if q.Cancel(w) {
		t.Fatal("second Cancel returned true")
	}
	// The timer can be reused once stopped.
	q.ScheduleAfter(w, time.Millisecond)
	eventually(t, "the rescheduled run", func() bool { return c.get() == 1 })
}

func TestManyTimersRace(t *testing.T) {
	// Rearm timers while they fire, to exercise stale fires under -race.
	q, _ := newQueue(t, WithWorkers(2))
	var c counter
	w := NewWork("racy", c.run)
	for i := range 500 {
		switch i % 3 {
		case 0:
			q.ScheduleAfter(w, time.Duration(i%7)*time.Microsecond)
		case 1:
			q.Reschedule(w, time.Duration(i%5)*time.Microsecond)
		case 2:
			if i%2 == 0 {
				q.Cancel(w)
			}
		}
	}
	q.Reschedule(w, 0)
	if _, err := q.FlushWork(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	if w.Pending() {
		t.Fatal("item pending after FlushWork")
	}
	s := q.Stats()
	if s.Scheduled != s.Run+s.Cancelled+uint64(s.Pending)+uint64(s.Running) {
		t.Fatalf("stats do not add up: %+v", s)
	}
}
