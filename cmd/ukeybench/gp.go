package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ukeys/ukeys/rcu"
)

// gpParams are the parameters of the gp scenario.
type gpParams struct {
	Trials     int     `json:"trials"`
	SyncTrials int     `json:"sync_trials"`
	MaxDelayMS float64 `json:"max_delay_ms"`
}

// gpWaiter waits for the grace period of a trial in one way.
type gpWaiter struct {
	name string
	// wait is called with c, a grace period begun while the holdout is
	// online, and must call release once to let the holdout run its delay.
	wait func(d *rcu.Domain, c rcu.Cookie, release func()) error
}

// The waiters. The pollers use rcu's polling cookies, so all three wait
// for the same grace period of the same domain; only how often they look
// differs. The pollers look once before the holdout is released (the
// kernel's first scan of its holdout list, taken as the grace period
// begins) and then after each sleep. Looking first after the release would
// let a waiter descheduled for longer than the holdout's delay see the
// grace period done without sleeping at all.
var gpWaiters = []gpWaiter{
	{"poll-1s", func(d *rcu.Domain, c rcu.Cookie, release func()) error {
		done := d.Done(c)
		release()
		for !done {
			time.Sleep(time.Second) // schedule_timeout_interruptible(HZ)
			done = d.Done(c)
		}
		return nil
	}},
	{"poll-backoff", func(d *rcu.Domain, c rcu.Cookie, release func()) error {
		done := d.Done(c)
		release()
		// The kernel after Rostedt's patch: HZ/10, then HZ/9, … HZ/1.
		for fract := 10; !done; fract = max(fract-1, 1) {
			time.Sleep(time.Second / time.Duration(fract))
			done = d.Done(c)
		}
		return nil
	}},
	{"synchronize", func(d *rcu.Domain, _ rcu.Cookie, release func()) error {
		release()
		return d.Synchronize(context.Background())
	}},
}

// runGP measures how long each waiter takes to see the grace period of a
// holdout task that passes its quiescent state after a random delay.
func runGP(p gpParams, maxDelay time.Duration, prog *progress) (report, error) {
	d := rcu.New(rcu.WithName("ukeybench-gp"), rcu.WithStallTimeout(0))
	defer d.Close()

	// The holdout goes online for a trial, is told to begin, holds the
	// grace period for its delay, then reports and goes offline again.
	type trial struct {
		delay time.Duration
		begin chan struct{}
		qs    chan time.Time
	}
	trials := make(chan trial)
	online := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := d.Register("holdout")
		defer t.Unregister()
		t.Offline()
		for tr := range trials {
			t.Online()
			online <- struct{}{}
			<-tr.begin
			// The holdout runs for its delay (time.Sleep would round a
			// sub-millisecond delay up to the timer's granularity).
			began := time.Now()
			for time.Since(began) < tr.delay {
			}
			at := time.Now()
			t.Quiescent()
			t.Offline()
			tr.qs <- at
		}
	}()
	defer func() { close(trials); <-exited }()

	rng := rand.New(rand.NewPCG(1, 2))
	var rows []row
	for _, w := range gpWaiters {
		n := p.Trials
		if w.name == "synchronize" {
			n = p.SyncTrials
		}
		h := newHist()
		over := newHist()
		held := newHist()
		prog.begin("gp "+w.name, n)
		for i := range n {
			tr := trial{delay: time.Duration(rng.Int64N(max(int64(maxDelay), 1))), begin: make(chan struct{}), qs: make(chan time.Time, 1)}
			trials <- tr
			<-online
			// The grace period the waiter waits for begins after the
			// holdout is online, so it must wait for its report.
			// The pollers' cookie is taken before the holdout is released:
			// a holdout quick to report would otherwise be offline again
			// before the grace period began, which would then wait for
			// nothing.
			t0 := time.Now()
			c := d.Start()
			if err := w.wait(d, c, func() { close(tr.begin) }); err != nil {
				return report{}, fmt.Errorf("gp %s: %w", w.name, err)
			}
			t1 := time.Now()
			qs := <-tr.qs
			record(h, t1.Sub(t0))
			record(over, t1.Sub(qs))
			record(held, qs.Sub(t0))
			prog.step(i + 1)
		}
		prog.end()
		r := histRow("holdout", w.name, "ms", h, 1e6)
		r.Extra = map[string]any{
			"holdout_p50_ms":   float64(held.ValueAtQuantile(50)) / 1e6,
			"overshoot_p50_ms": float64(over.ValueAtQuantile(50)) / 1e6,
			"overshoot_max_ms": float64(over.Max()) / 1e6,
		}
		rows = append(rows, r)
	}
	// Ratios of medians against the one-second poller, as the kernel
	// patch quoted them (1.064 s to 0.124 s).
	base := rows[0].P50
	for i := range rows {
		if rows[i].P50 > 0 {
			rows[i].Extra["speedup_p50_vs_poll_1s"] = base / rows[i].P50
		}
	}
	return report{Scenario: "gp", Params: p, Results: rows}, nil
}

// newHist returns a histogram of durations in nanoseconds, up to a minute,
// with three significant digits.
func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(time.Minute), 3) }

func record(h *hdrhistogram.Histogram, d time.Duration) {
	_ = h.RecordValue(min(max(d.Nanoseconds(), 1), h.HighestTrackableValue()))
}
