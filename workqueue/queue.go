package workqueue

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ukeys/ukeys/internal/goroutine"
	"github.com/ukeys/ukeys/internal/invariants"
	"github.com/ukeys/ukeys/rcu"
)

// Queue runs work items on a fixed pool of worker goroutines, each a task
// of an rcu domain. Create it with [New] and stop it with [Queue.Close].
type Queue struct {
	// rejected counts Schedule calls on items already pending. It is the
	// only counter the fast path touches, so it sits on a line of its own.
	rejected atomic.Uint64
	_        [56]byte

	d   *rcu.Domain
	cfg config

	mu       sync.Mutex
	work     *sync.Cond // idle workers wait here for runnable items
	runnable list
	delayed  list
	idle     int    // workers parked on work and not yet signalled
	sleeps   uint64 // times a worker parked, for tests of the busy path
	flush    flushGens

	scheduled, runs, cancelled uint64
	pendingN, runningN         int

	closing  bool          // Close has begun: only chained work is accepted
	stopping bool          // the drain is over: workers exit
	closed   chan struct{} // closed when Close returns

	workers []*worker // fixed at New
	wg      sync.WaitGroup
	timers  sync.WaitGroup // armed delay timers whose function may still run
	wd      *watchdog
}

// worker is one goroutine of the pool.
type worker struct {
	id  int
	gid int64 // the goroutine, for self-deadlock checks and watchdog stacks

	// Guarded by q.mu.
	cur     *Work
	started time.Time
	seq     uint64 // items started, so the watchdog can tell runs apart
	gen     uint64 // flush generation of the running instance

	hist histograms
}

// New creates a queue whose workers are tasks of d, and starts them. d
// must outlive the queue: close the queue first.
func New(d *rcu.Domain, opts ...Option) *Queue {
	if d == nil {
		panic("workqueue: New with a nil rcu domain")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.workers == 0 {
		cfg.workers = runtime.GOMAXPROCS(0)
	}
	q := &Queue{d: d, cfg: cfg, closed: make(chan struct{})}
	q.work = sync.NewCond(&q.mu)
	q.flush.init()
	q.workers = make([]*worker, cfg.workers)
	for i := range q.workers {
		q.workers[i] = &worker{id: i}
		q.workers[i].hist.init()
	}
	if cfg.watchdog > 0 {
		q.wd = newWatchdog(q)
	}
	var started sync.WaitGroup
	for _, wk := range q.workers {
		q.wg.Add(1)
		started.Add(1)
		go q.runWorker(wk, &started)
	}
	// Wait until every worker knows its goroutine: Cancel, Flush and the
	// watchdog rely on it.
	started.Wait()
	return q
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.cfg.name }

// runWorker is a worker's loop. The worker is an rcu task: online while it
// runs an item, reporting a quiescent state after each one (so that a
// queue kept busy by short items never holds a grace period for long),
// and offline while it sleeps waiting for work (so that an idle queue
// holds none at all).
func (q *Queue) runWorker(wk *worker, started *sync.WaitGroup) {
	defer q.wg.Done()
	t := q.d.Register(fmt.Sprintf("%s/worker-%d", q.cfg.name, wk.id))
	defer t.Unregister()
	wk.gid = goroutine.ID()
	started.Done()

	q.mu.Lock()
	for {
		w := q.runnable.pop()
		if w == nil {
			if q.stopping {
				q.mu.Unlock()
				return
			}
			q.idle++
			q.sleeps++
			t.Offline()
			q.work.Wait()
			t.Online()
			continue
		}
		// The pending bit clears just before the function runs, so an item
		// that must run again because of something that happens during
		// this run can be scheduled again and will not be lost.
		now := time.Now()
		w.place = nowhere
		w.pending.Store(false)
		w.runner = wk
		q.pendingN--
		q.runningN++
		wk.cur, wk.started, wk.gen = w, now, w.gen
		wk.seq++
		ready := w.readyAt
		q.mu.Unlock()

		if q.wd != nil {
			q.wd.arm()
		}
		w.fn(t)
		end := time.Now()
		wk.hist.record(now.Sub(ready), end.Sub(now))
		// A quiescent state between items, without a yield: Go preempts a
		// busy worker anyway, and a yield here sent an item that
		// reschedules itself (the key collector, a chunk per item) to the
		// back of the run queue after every chunk while a grace period
		// was waiting, behind every runnable goroutine.
		t.Quiescent()

		q.mu.Lock()
		q.finish(wk, w)
	}
}

// finish retires the run of w on wk. Called with q.mu held.
func (q *Queue) finish(wk *worker, w *Work) {
	wk.cur = nil
	w.runner = nil
	w.runs++
	q.runs++
	q.runningN--
	if w.place == afterRun {
		// Scheduled again while it ran: now it may run. This worker goes on
		// to the head of the line, so nobody needs waking.
		w.place = onRunnable
		q.runnable.push(w)
	}
	q.retire(wk.gen)
	w.notify()
	if invariants.Enabled {
		q.checkLocked()
	}
}

// checkLocked verifies the counters against the lists, in builds with
// invariants. Items pending behind their own run are in neither list.
func (q *Queue) checkLocked() {
	if q.runningN < 0 || q.pendingN < q.runnable.n+q.delayed.n {
		panic(fmt.Sprintf("workqueue: queue %s: %d running, %d pending but %d queued and %d delayed",
			q.cfg.name, q.runningN, q.pendingN, q.runnable.n, q.delayed.n))
	}
	if q.runnable.n > q.flush.inflight {
		panic(fmt.Sprintf("workqueue: queue %s: %d queued but only %d in flight", q.cfg.name, q.runnable.n, q.flush.inflight))
	}
}

// onWorkerLocked reports whether the caller is one of q's workers, that
// is, an item running on q. Learning the goroutine costs a microsecond, so
// only slow paths ask.
func (q *Queue) onWorkerLocked() bool {
	gid := goroutine.ID()
	for _, wk := range q.workers {
		if wk.gid == gid {
			return true
		}
	}
	return false
}

// Close stops the queue (the kernel's destroy_workqueue): from now on
// [Queue.Schedule], [Queue.ScheduleAfter] and [Queue.Reschedule] do nothing
// and return false. It then drains the queue: delayed items become runnable
// at once, every runnable item runs, and items running during the drain may
// schedule themselves or other items again (chained work), which runs too.
// When nothing is left it stops the workers and the watchdog and returns.
//
// Close is idempotent; a second call waits for the first to finish. It
// panics if called from an item of the queue, which it would wait for.
func (q *Queue) Close() {
	q.mu.Lock()
	if q.onWorkerLocked() {
		q.mu.Unlock()
		panic("workqueue: Close of queue " + q.cfg.name + " called from one of its items: it would wait for itself")
	}
	if q.closing {
		q.mu.Unlock()
		<-q.closed
		return
	}
	q.closing = true
	for q.delayed.head != nil {
		q.expedite(q.delayed.head)
	}
	// Chained work may add instances while we wait, so wait in rounds until
	// a round finds nothing in flight. Delayed items cannot reappear: while
	// closing every delay is zero.
	for q.flush.inflight > 0 {
		_ = q.waitGen(context.Background(), q.flush.next())
	}
	q.stopping = true
	q.idle = 0
	q.work.Broadcast()
	q.mu.Unlock()

	q.wg.Wait()
	if q.wd != nil {
		q.wd.stop()
	}
	q.timers.Wait()
	close(q.closed)
}
