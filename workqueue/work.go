package workqueue

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ukeys/ukeys/internal/goroutine"
	"github.com/ukeys/ukeys/rcu"
)

// Work is a work item: a named function that a [Queue] runs on one of its
// workers. Create it with [NewWork] and reuse it: scheduling the same Work
// again is how a job asks to run again, and its pending bit is what makes
// repeated requests collapse into one run.
//
// A Work may be pending or running on only one Queue at a time. Once it is
// neither it may be scheduled on another queue.
type Work struct {
	// pending is the kernel's WORK_STRUCT_PENDING bit. It is written only
	// under the owning queue's mutex but read without it, so that
	// scheduling an item that is already pending costs two atomic loads.
	pending atomic.Bool
	// q is the queue that owns the fields below; it changes only while the
	// item is idle, under the old owner's mutex (see claim).
	q atomic.Pointer[Queue]

	name string
	fn   func(*rcu.Task)

	// Guarded by q.mu.
	place      place
	prev, next *Work     // links in q.runnable or q.delayed
	gen        uint64    // flush generation of the runnable instance
	readyAt    time.Time // when the pending instance became runnable
	runner     *worker   // the worker running the item, or nil
	runs       uint64    // runs completed, so FlushWork can tell which it waits for
	canceling  int       // Cancel calls waiting for a run to end: refuse new instances
	dt         *delayTimer
	changed    chan struct{} // closed when a run ends or the instance is cancelled
}

// place says where an item's pending instance is.
type place uint8

const (
	nowhere    place = iota // not pending
	onRunnable              // in q.runnable, waiting for a worker
	onDelayed               // in q.delayed, its timer armed
	afterRun                // runnable, but running now: queued when the run ends
)

// NewWork returns a work item that runs fn. The name identifies the item
// in watchdog reports and logs; it is set by code and must never carry
// secrets or user data.
func NewWork(name string, fn func()) *Work {
	if fn == nil {
		panic("workqueue: NewWork with a nil function")
	}
	return &Work{name: name, fn: func(*rcu.Task) { fn() }}
}

// NewTaskWork returns a work item whose function receives the rcu task of
// the worker running it. An item that loops over many elements calls
// t.Checkpoint() in its loop, so that a grace period waiting for the worker
// does not wait for the whole run (the lesson of the kernel's
// cond_resched_tasks_rcu_qs). Between two checkpoints the item may use
// rcu-protected data of the queue's domain without a read section; it must
// not keep pointers across a checkpoint. The task is valid only during the
// call: the item must not Unregister it or keep it.
func NewTaskWork(name string, fn func(t *rcu.Task)) *Work {
	if fn == nil {
		panic("workqueue: NewTaskWork with a nil function")
	}
	return &Work{name: name, fn: fn}
}

// Name returns the item's name.
func (w *Work) Name() string { return w.name }

// Pending reports whether the item has an instance waiting to run (queued
// or delayed), like the kernel's work_pending. A running item is not
// pending unless it has been scheduled again since it started.
func (w *Work) Pending() bool { return w.pending.Load() }

// notify wakes Cancel and FlushWork calls waiting on the item.
func (w *Work) notify() {
	if w.changed != nil {
		close(w.changed)
		w.changed = nil
	}
}

func (w *Work) wait() <-chan struct{} {
	if w.changed == nil {
		w.changed = make(chan struct{})
	}
	return w.changed
}

// busy reports whether the item is in use on its owning queue, which then
// may not hand it to another one.
func (w *Work) busy() bool {
	return w.pending.Load() || w.runner != nil || w.canceling > 0
}

// Schedule queues w to run as soon as a worker is free (the kernel's
// schedule_work). If w is already pending it does nothing and returns
// false: the pending instance will do the job. If w is running, the new
// instance runs after the current run ends, never concurrently with it.
//
// Schedule returns false, doing nothing, after [Queue.Close] has begun,
// except when called from an item running on this queue during Close's
// drain. It panics if w is pending or running on another queue.
func (q *Queue) Schedule(w *Work) bool {
	if w.pending.Load() && w.q.Load() == q {
		q.rejected.Add(1)
		return false
	}
	ok, _ := q.enqueue(w, 0, false)
	return ok
}

// enqueue gives w a pending instance that becomes runnable after delay.
// With modify (Reschedule) an existing pending instance gets the new delay;
// without it, an existing instance makes the call a no-op. It reports
// whether it queued or modified an instance and whether w was pending.
func (q *Queue) enqueue(w *Work, delay time.Duration, modify bool) (ok, was bool) {
	q.claim(w)
	defer q.mu.Unlock()
	was = w.pending.Load()
	if !q.acceptingLocked() || w.canceling > 0 {
		return false, was
	}
	if q.closing {
		delay = 0 // draining: nothing may wait for a timer that Close outlives
	}
	if was {
		if !modify {
			q.rejected.Add(1)
			return false, true
		}
		if delay <= 0 && w.place != onDelayed {
			return true, true // already runnable: keep its place in line
		}
		q.withdraw(w)
	} else {
		w.pending.Store(true)
		q.pendingN++
		q.scheduled++
	}
	if delay <= 0 {
		q.makeRunnable(w, time.Now())
	} else {
		q.arm(w, delay)
	}
	return true, was
}

// claim locks q.mu with q owning w, taking w over from another queue if it
// is idle there. Ownership decides which mutex guards w's fields, so it
// moves only under the old owner's mutex and only when no other field of
// w says it is in use.
func (q *Queue) claim(w *Work) {
	for {
		switch o := w.q.Load(); o {
		case q:
			q.mu.Lock()
			if w.q.Load() == q {
				return
			}
			q.mu.Unlock()
		case nil:
			w.q.CompareAndSwap(nil, q)
		default:
			o.mu.Lock()
			if w.q.Load() == o {
				if w.busy() {
					o.mu.Unlock()
					panic(fmt.Sprintf("workqueue: work %q scheduled on queue %q while pending or running on queue %q",
						w.name, q.cfg.name, o.cfg.name))
				}
				w.q.Store(q)
			}
			o.mu.Unlock()
		}
	}
}

// lockIfOwner locks q.mu and returns true if q owns w; otherwise it
// returns false without the lock: w has nothing pending or running here.
func (q *Queue) lockIfOwner(w *Work) bool {
	for w.q.Load() == q {
		q.mu.Lock()
		if w.q.Load() == q {
			return true
		}
		q.mu.Unlock()
	}
	return false
}

// acceptingLocked reports whether new instances may be queued: always
// before Close, and during Close's drain only from the queue's own items,
// so that chained work (an item that schedules its own continuation)
// completes as it does under the kernel's drain_workqueue.
func (q *Queue) acceptingLocked() bool {
	if !q.closing {
		return true
	}
	return !q.stopping && q.onWorkerLocked()
}

// makeRunnable puts w's pending instance in line for a worker, or behind
// its own current run: an item never runs concurrently with itself.
func (q *Queue) makeRunnable(w *Work, now time.Time) {
	w.readyAt = now
	w.gen = q.admit()
	if w.runner != nil {
		w.place = afterRun
		return
	}
	w.place = onRunnable
	q.runnable.push(w)
	if q.idle > 0 {
		q.idle-- // counted here, not by the worker, so a burst wakes each sleeper once
		q.work.Signal()
	}
}

// withdraw takes w's pending instance out of wherever it waits, leaving
// the pending bit to the caller.
func (q *Queue) withdraw(w *Work) {
	switch w.place {
	case onRunnable:
		q.runnable.remove(w)
		q.retire(w.gen)
	case afterRun:
		q.retire(w.gen)
	case onDelayed:
		q.delayed.remove(w)
		q.disarm(w)
	}
	w.place = nowhere
}

// Cancel removes w's pending instance, queued or delayed, and waits for a
// running instance to finish (the kernel's cancel_work_sync and
// cancel_delayed_work_sync). While it waits, attempts to schedule w fail,
// so that on return w is neither pending nor running even if it tried to
// requeue itself. It returns whether w was pending.
//
// Cancel panics if called from w's own function: it would wait for itself.
func (q *Queue) Cancel(w *Work) bool {
	if !q.lockIfOwner(w) {
		return false
	}
	if w.runner != nil && w.runner.gid == goroutine.ID() {
		q.mu.Unlock()
		panic(fmt.Sprintf("workqueue: Cancel of work %q called from its own function: it would wait for itself", w.name))
	}
	was := w.pending.Load()
	if was {
		q.withdraw(w)
		w.pending.Store(false)
		q.pendingN--
		q.cancelled++
		w.notify()
	}
	if w.runner != nil {
		w.canceling++
		for w.runner != nil {
			ch := w.wait()
			q.mu.Unlock()
			<-ch
			q.mu.Lock()
		}
		w.canceling--
	}
	q.mu.Unlock()
	return was
}

// list is an intrusive doubly-linked list of items, so that Cancel and
// Reschedule unlink an item in constant time.
type list struct {
	head, tail *Work
	n          int
}

func (l *list) push(w *Work) {
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.n++
}

func (l *list) pop() *Work {
	w := l.head
	if w != nil {
		l.remove(w)
	}
	return w
}

func (l *list) remove(w *Work) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
	l.n--
}
