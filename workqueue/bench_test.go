package workqueue

import (
	"context"
	"testing"
	"time"

	"github.com/ukeys/ukeys/rcu"
)

func benchQueue(b *testing.B, opts ...Option) *Queue {
	d := rcu.New()
	q := New(d, opts...)
	b.Cleanup(func() {
		q.Close()
		_ = d.Close()
	})
	return q
}

// BenchmarkScheduleRun measures Schedule plus the run of an empty item,
// amortized over batches of distinct items (so that every Schedule
// queues an instance) with a Flush per batch.
func BenchmarkScheduleRun(b *testing.B) {
	q := benchQueue(b)
	const batch = 256
	items := make([]*Work, batch)
	for i := range items {
		items[i] = NewWork("empty", func() {})
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		for _, w := range items[:min(batch, b.N-i)] {
			if !q.Schedule(w) {
				b.Fatal("Schedule returned false")
			}
		}
		if err := q.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSchedulePending measures Schedule of an item that is already
// pending: the no-op that lets producers request work freely.
func BenchmarkSchedulePending(b *testing.B) {
	q := benchQueue(b)
	w := NewWork("pending", func() {})
	q.ScheduleAfter(w, time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if q.Schedule(w) {
			b.Fatal("Schedule of a pending item returned true")
		}
	}
	b.StopTimer()
	q.Cancel(w)
}

// BenchmarkSchedulePendingParallel is the same from every processor at
// once, where the shared rejection counter is the only contended word.
func BenchmarkSchedulePendingParallel(b *testing.B) {
	q := benchQueue(b)
	w := NewWork("pending", func() {})
	q.ScheduleAfter(w, time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			q.Schedule(w)
		}
	})
	b.StopTimer()
	q.Cancel(w)
}

// BenchmarkRescheduleDelayed measures moving a delayed item's timer, the
// path a collector takes when it pulls its next pass earlier.
func BenchmarkRescheduleDelayed(b *testing.B) {
	q := benchQueue(b)
	w := NewWork("delayed", func() {})
	q.ScheduleAfter(w, time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		q.Reschedule(w, time.Hour+time.Duration(i&1)*time.Minute)
	}
	b.StopTimer()
	q.Cancel(w)
}
