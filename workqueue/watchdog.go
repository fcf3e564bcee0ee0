package workqueue

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ukeys/ukeys/internal/goroutine"
)

// WatchdogReport describes an item that has been running longer than the
// watchdog threshold.
type WatchdogReport struct {
	// Queue and Work name the queue and the item.
	Queue string
	Work  string
	// Worker numbers the worker running the item (0…workers-1) and
	// Goroutine is its goroutine.
	Worker    int
	Goroutine int64
	// Started is when the run began; Running how long it had lasted when
	// the report was made.
	Started time.Time
	Running time.Duration
	// Report counts the reports made for this run: 1, 2, 3… They repeat at
	// doubling intervals while the run lasts.
	Report int
	// Stack is the worker goroutine's stack at the time of the report,
	// which shows where the item is stuck. Empty if it could not be read.
	Stack string
}

// String renders the report with the stack indented below it.
func (r WatchdogReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "workqueue: queue %q: work %q has been running for %v on worker %d (goroutine %d, report %d)\n",
		r.Queue, r.Work, r.Running.Round(time.Millisecond), r.Worker, r.Goroutine, r.Report)
	if r.Stack != "" {
		b.WriteString("    ")
		b.WriteString(strings.ReplaceAll(strings.TrimRight(r.Stack, "\n"), "\n", "\n    "))
		b.WriteString("\n")
	}
	return b.String()
}

// watchdog reports long-running items. It costs the idle path nothing: its
// goroutine sleeps on a timer that a worker arms when it starts an item
// and the timer is not already armed. While items keep running the
// watchdog re-arms the timer for the next report due; once nothing runs
// it lets the timer lapse, and the next item to start arms it again.
type watchdog struct {
	q         *Queue
	threshold time.Duration
	timer     *time.Timer
	// armed is true from the moment someone arms the timer until the
	// watchdog, finding nothing running, lets it lapse. Only the goroutine
	// that sets it to true may touch the timer, so Reset never races.
	armed   atomic.Bool
	reports atomic.Uint64
	quit    chan struct{}
	done    chan struct{}
	seen    []watched // per worker; only the watchdog goroutine uses it
}

// watched is what the watchdog remembers about one worker's current run.
type watched struct {
	seq     uint64 // worker.seq of the run
	reports int    // reports made for it
}

func newWatchdog(q *Queue) *watchdog {
	wd := &watchdog{
		q:         q,
		threshold: q.cfg.watchdog,
		timer:     time.NewTimer(time.Hour),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
		seen:      make([]watched, len(q.workers)),
	}
	wd.timer.Stop()
	go wd.loop()
	return wd
}

// arm makes sure the timer will fire; a worker calls it as it starts an
// item. When the timer is armed already it costs one atomic load.
func (wd *watchdog) arm() {
	if !wd.armed.Load() && wd.armed.CompareAndSwap(false, true) {
		wd.timer.Reset(wd.threshold)
	}
}

func (wd *watchdog) stop() {
	close(wd.quit)
	<-wd.done
}

func (wd *watchdog) loop() {
	defer close(wd.done)
	for {
		select {
		case <-wd.timer.C:
			wd.check()
		case <-wd.quit:
			wd.timer.Stop()
			return
		}
	}
}

// dueAt returns the age of a run at which its report number n+1 is due:
// threshold, 3×threshold, 7×threshold…, so the intervals double.
func (wd *watchdog) dueAt(n int) time.Duration {
	n = min(n, 32) // beyond that the next report is centuries away anyway
	return wd.threshold * time.Duration(int64(1)<<(n+1)-1)
}

// check reports the runs that are due and re-arms or lapses the timer.
func (wd *watchdog) check() {
	q := wd.q
	now := time.Now()
	var due []WatchdogReport
	next := time.Duration(-1)
	q.mu.Lock()
	for i, wk := range q.workers {
		if wk.cur == nil {
			continue
		}
		s := &wd.seen[i]
		if s.seq != wk.seq {
			*s = watched{seq: wk.seq}
		}
		age := now.Sub(wk.started)
		if age >= wd.dueAt(s.reports) {
			s.reports++
			due = append(due, WatchdogReport{
				Queue:     q.cfg.name,
				Work:      wk.cur.name,
				Worker:    wk.id,
				Goroutine: wk.gid,
				Started:   wk.started,
				Running:   age,
				Report:    s.reports,
			})
		}
		if wait := wd.dueAt(s.reports) - age; next < 0 || wait < next {
			next = wait
		}
	}
	q.mu.Unlock()

	if next >= 0 {
		wd.timer.Reset(next)
	} else {
		wd.armed.Store(false)
		// A worker that started an item after the scan above saw armed
		// still true and did not arm; look again now that it is false.
		q.mu.Lock()
		running := q.runningN > 0
		q.mu.Unlock()
		if running && wd.armed.CompareAndSwap(false, true) {
			wd.timer.Reset(wd.threshold)
		}
	}
	if len(due) == 0 {
		return
	}
	ids := make([]int64, len(due))
	for i, r := range due {
		ids[i] = r.Goroutine
	}
	stacks := goroutine.Stacks(ids...)
	for _, r := range due {
		r.Stack = stacks[r.Goroutine]
		wd.reports.Add(1)
		if q.cfg.wdHandler != nil {
			q.cfg.wdHandler(r)
		} else {
			wd.log(r)
		}
	}
}

func (wd *watchdog) log(r WatchdogReport) {
	l := wd.q.cfg.logger
	if l == nil {
		l = slog.Default()
	}
	l.Warn("workqueue: work item running too long",
		slog.String("queue", r.Queue),
		slog.String("work", r.Work),
		slog.Duration("running", r.Running),
		slog.Int("report", r.Report),
		slog.Int("worker", r.Worker),
		slog.Int64("goroutine", r.Goroutine),
		slog.String("stack", r.Stack),
	)
}
