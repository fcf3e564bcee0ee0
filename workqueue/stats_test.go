package workqueue

import (
	"context"
	"testing"
	"time"
)

func TestStatsCounters(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1))
	g := gate(t, q) // scheduled 1, running 1

	var c counter
	a := NewWork("a", c.run)
	q.Schedule(a) // scheduled 2
	q.Schedule(a) // rejected 1
	b := NewWork("b", c.run)
	q.ScheduleAfter(b, time.Hour) // scheduled 3
	q.ScheduleAfter(b, time.Hour) // rejected 2
	q.Reschedule(b, 2*time.Hour)  // modifies: neither scheduled nor rejected
	slow := NewWork("slow", func() { time.Sleep(2 * time.Millisecond) })
	q.Schedule(slow) // scheduled 4
	x := NewWork("x", c.run)
	q.Reschedule(x, time.Hour) // scheduled 5
	q.Cancel(x)                // cancelled 1

	s := q.Stats()
	want := Stats{Workers: 1, Scheduled: 5, Rejected: 2, Cancelled: 1, Pending: 3, Running: 1}
	if s.Workers != want.Workers || s.Scheduled != want.Scheduled || s.Rejected != want.Rejected ||
		s.Cancelled != want.Cancelled || s.Pending != want.Pending || s.Running != want.Running || s.Run != 0 {
		t.Fatalf("while gated: %+v, want %+v", s, want)
	}
	if s.Scheduled != s.Run+uint64(s.Running)+s.Cancelled+uint64(s.Pending) {
		t.Fatalf("counters do not add up: %+v", s)
	}

	g.open()
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	s = q.Stats()
	if s.Run != 3 || s.Pending != 1 || s.Running != 0 {
		t.Fatalf("after Flush: %+v, want Run 3 (gate, a, slow), Pending 1 (b)", s)
	}
	if s.RunTime.Count != 3 || s.Wait.Count != 3 {
		t.Fatalf("histograms count %d runs and %d waits, want 3", s.RunTime.Count, s.Wait.Count)
	}
	// A lower bound only: slow slept for 2ms.
	if s.RunTime.Max < 2*time.Millisecond {
		t.Fatalf("RunTime.Max = %v, want at least 2ms", s.RunTime.Max)
	}
	if !(s.RunTime.Min <= s.RunTime.P50 && s.RunTime.P50 <= s.RunTime.P99 &&
		s.RunTime.P99 <= s.RunTime.P999 && s.RunTime.P999 <= s.RunTime.Max) {
		t.Fatalf("RunTime summary out of order: %+v", s.RunTime)
	}
	// a and slow waited behind the gate.
	if s.Wait.Max <= 0 {
		t.Fatalf("Wait.Max = %v", s.Wait.Max)
	}

	q.Close() // b runs at Close
	s = q.Stats()
	if s.Run != 4 || s.Pending != 0 || s.RunTime.Count != 4 || s.Wait.Count != 4 {
		t.Fatalf("after Close: %+v", s)
	}
}

func TestStatsEmpty(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(2))
	s := q.Stats()
	if s != (Stats{Workers: 2}) {
		t.Fatalf("fresh queue: %+v", s)
	}
}
