package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ukeys/ukeys/rcu"
)

// stallParams are the parameters of the stall scenario.
type stallParams struct {
	LoopMS         float64 `json:"loop_ms"`
	Rounds         int     `json:"rounds"`
	StallTimeoutMS float64 `json:"stall_timeout_ms"`
	// WorkPerIteration is the size of one iteration's busy work, in
	// rounds of a hash step: it sets the time between two checkpoints.
	WorkPerIteration int `json:"work_per_iteration"`
}

// stallWork is the busy work of one loop iteration (a few microseconds).
const stallWork = 2000

// sink keeps the busy work from being optimised away.
var sink atomic.Uint64

// runStall runs a registered task through a long loop that only yields
// (the kernel's cond_resched, which reports no Tasks-RCU quiescent state)
// and through the same loop calling Checkpoint, while the main goroutine
// calls Synchronize back to back and times each grace period.
func runStall(p stallParams, loop, stallTimeout time.Duration, prog *progress) (report, error) {
	p.WorkPerIteration = stallWork
	rep := report{Scenario: "stall", Params: p}
	for _, variant := range []string{"gosched", "checkpoint"} {
		// A domain per variant, so that its own grace-period statistics
		// (from the start of each grace period to its last report, without
		// the waiter's wake-up) belong to the variant.
		var mu sync.Mutex
		var reports []rcu.StallReport
		d := rcu.New(rcu.WithName("ukeybench-stall-"+variant), rcu.WithStallTimeout(stallTimeout),
			rcu.WithStallHandler(func(r rcu.StallReport) {
				mu.Lock()
				reports = append(reports, r)
				mu.Unlock()
			}))
		defer d.Close()
		gp := newHist()
		between := newHist()
		var iterations int64
		prog.begin("stall "+variant, p.Rounds)
		for round := range p.Rounds {
			started := make(chan struct{})
			done := make(chan struct{})
			var betweenRound = newHist()
			var its int64
			go func() {
				defer close(done)
				t := d.Register("long-loop")
				defer t.Unregister()
				close(started)
				end := time.Now().Add(loop)
				prev := time.Now()
				x := uint64(round + 1)
				for {
					for range stallWork {
						x ^= x << 13
						x ^= x >> 7
						x ^= x << 17
					}
					if variant == "checkpoint" {
						t.Checkpoint()
					} else {
						runtime.Gosched()
					}
					now := time.Now()
					record(betweenRound, now.Sub(prev))
					prev = now
					its++
					if now.After(end) {
						break
					}
				}
				sink.Add(x)
			}()
			<-started
			for running := true; running; {
				t0 := time.Now()
				if err := d.Synchronize(context.Background()); err != nil {
					return report{}, err
				}
				record(gp, time.Since(t0))
				select {
				case <-done:
					running = false
				default:
				}
			}
			between.Merge(betweenRound)
			iterations += its
			prog.step(round + 1)
		}
		prog.end()
		mu.Lock()
		mine := reports
		mu.Unlock()
		st := d.Stats().GracePeriodLatency
		r := histRow("long-loop", variant, "ms", gp, 1e6)
		r.Extra = map[string]any{
			"stall_reports":              len(mine),
			"max_between_checkpoints_ms": float64(between.Max()) / 1e6,
			"p99_between_checkpoints_ms": float64(between.ValueAtQuantile(99)) / 1e6,
			"iterations":                 iterations,
			"domain_gp_p99_ms":           ms(st.P99),
			"domain_gp_max_ms":           ms(st.Max),
		}
		if len(mine) > 0 {
			// The first report, with the holding task and its stack: the
			// message a developer would see in the log.
			r.Extra["stall_report"] = mine[0].String()
			rep.notes = append(rep.notes, fmt.Sprintf("first stall report of the %s variant:\n%s", variant, mine[0].String()))
		}
		rep.Results = append(rep.Results, r)
	}
	return rep, nil
}
