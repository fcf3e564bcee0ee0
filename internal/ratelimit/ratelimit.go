package ratelimit

import (
	"sync"
	"time"
)

// A Limiter lets through at most Burst events per Interval and counts
// the rest. Set Interval and Burst before its first use; it is safe for
// concurrent use.
type Limiter struct {
	Interval time.Duration
	Burst    int

	mu         sync.Mutex
	start      time.Time
	n          int
	suppressed int
}

// Allow reports whether an event may be logged now, and how many were
// suppressed since the last one that was.
func (r *Limiter) Allow(now time.Time) (ok bool, suppressed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.start) >= r.Interval {
		r.start, r.n = now, 0
	}
	if r.n >= r.Burst {
		r.suppressed++
		return false, 0
	}
	r.n++
	suppressed, r.suppressed = r.suppressed, 0
	return true, suppressed
}
