package workqueue

import (
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ukeys/ukeys/internal/latency"
)

// Latency summarises a distribution of durations: count, min, mean,
// p50, p99, p99.9 and max.
type Latency = latency.Summary

// Stats is a snapshot of a queue's counters.
type Stats struct {
	// Workers is the size of the pool.
	Workers int
	// Scheduled counts instances created: Schedule and ScheduleAfter calls
	// that returned true, and Reschedule calls on items that were not
	// pending. Every instance is eventually run or cancelled, so
	// Scheduled = Run + Running + Cancelled + Pending.
	Scheduled uint64
	// Rejected counts Schedule and ScheduleAfter calls that found the item
	// already pending and did nothing.
	Rejected uint64
	// Run counts completed runs.
	Run uint64
	// Cancelled counts pending instances removed by Cancel.
	Cancelled uint64
	// WatchdogReports counts reports of long-running items.
	WatchdogReports uint64
	// Pending is the number of items pending now (queued or delayed),
	// Running the number running.
	Pending int
	Running int
	// RunTime summarises how long runs took. Wait summarises how long
	// items waited for a worker: from the moment they became runnable
	// (Schedule, or the expiry of their delay) until their run began.
	RunTime Latency
	Wait    Latency
}

// Stats returns a snapshot of the queue's counters and latencies.
func (q *Queue) Stats() Stats {
	s := Stats{Workers: len(q.workers), Rejected: q.rejected.Load()}
	q.mu.Lock()
	s.Scheduled = q.scheduled
	s.Run = q.runs
	s.Cancelled = q.cancelled
	s.Pending = q.pendingN
	s.Running = q.runningN
	q.mu.Unlock()
	if q.wd != nil {
		s.WatchdogReports = q.wd.reports.Load()
	}
	run, wait := newHistogram(), newHistogram()
	for _, wk := range q.workers {
		wk.hist.mergeInto(run, wait)
	}
	s.RunTime, s.Wait = latency.Of(run), latency.Of(wait)
	return s
}

// Histograms cover 1ns to an hour with two significant digits: 1% is
// plenty for latency summaries, and at 36 KiB each a worker's pair stays
// small (three digits would take eight times as much).
const (
	histMax    = int64(time.Hour)
	histDigits = 2
)

func newHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(1, histMax, histDigits) }

// histograms are one worker's records. Each worker has its own, under its
// own mutex, so recording never contends with other workers; only Stats
// takes the mutexes of all of them.
type histograms struct {
	mu        sync.Mutex
	run, wait *hdrhistogram.Histogram
}

func (h *histograms) init() { h.run, h.wait = newHistogram(), newHistogram() }

func (h *histograms) record(wait, run time.Duration) {
	h.mu.Lock()
	_ = h.wait.RecordValue(clamp(wait))
	_ = h.run.RecordValue(clamp(run))
	h.mu.Unlock()
}

func (h *histograms) mergeInto(run, wait *hdrhistogram.Histogram) {
	h.mu.Lock()
	run.Merge(h.run)
	wait.Merge(h.wait)
	h.mu.Unlock()
}

// clamp keeps a value inside the histogram's range: a run longer than an
// hour is recorded as an hour rather than dropped.
func clamp(d time.Duration) int64 { return min(max(int64(d), 1), histMax) }
