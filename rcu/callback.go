package rcu

import (
	"context"
	"runtime"
	"sync"

	"github.com/ukeys/ukeys/internal/goroutine"
)

// callbacks is the queue behind Call. Callbacks are invoked in the order
// they were queued, so Barrier only needs to wait for a ticket number.
type callbacks struct {
	mu       sync.Mutex
	room     *sync.Cond // signalled when the backlog shrinks
	pending  []func()
	spare    []func()
	backlog  int
	queued   uint64 // tickets handed out by Call
	invoked  uint64 // tickets whose callback has run
	inline   uint64 // run by Call itself after an inline grace period
	waits    uint64 // Calls that waited for room
	overflow uint64 // Calls from online tasks queued beyond the bound
	waiters  int
	idle     bool          // the worker is parked waiting for work
	progress chan struct{} // closed when invoked advances, if a Barrier waits
	closing  bool
	gid      int64 // the worker's goroutine
	kick     chan struct{}
	exited   chan struct{}
}

func (q *callbacks) init() {
	q.room = sync.NewCond(&q.mu)
	q.kick = make(chan struct{}, 1)
	q.exited = make(chan struct{})
}

func (q *callbacks) close() {
	q.mu.Lock()
	q.closing = true
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Call arranges for fn to run after a grace period: once every read section
// that began before Call has ended and every online task has passed a
// quiescent state. Callbacks run on the domain's worker goroutine, in the
// order they were queued, in batches (see [WithCallbackBatch]) with a yield
// of the processor between batches.
//
// The backlog of callbacks not yet run is bounded ([WithCallbackBacklog]).
// When it is full, Call waits for the worker to make room, or with
// [WithInlineGracePeriod] waits for a grace period itself and runs fn before
// returning; the caller feels backpressure instead of the process growing
// without limit. A callback, or an online task of the domain, may call
// Call; if the backlog is full then, the bound is exceeded rather than
// deadlocking: waiting would hold the grace period that frees room.
func (d *Domain) Call(fn func()) {
	if fn == nil {
		panic("rcu: Call with a nil function")
	}
	q := &d.cb
	q.mu.Lock()
	if q.closing && goroutine.ID() != q.gid {
		// Callbacks may still queue callbacks while Close drains them.
		q.mu.Unlock()
		panic("rcu: Call on a closed domain")
	}
	if q.backlog >= d.cfg.backlog {
		if !d.waitForRoom() {
			// Inline grace period: d.cb.mu has been released.
			if err := d.Synchronize(context.Background()); err != nil {
				panic("rcu: Call: inline grace period failed: " + err.Error())
			}
			fn()
			q.mu.Lock()
			q.inline++
			q.mu.Unlock()
			return
		}
	}
	q.pending = append(q.pending, fn)
	q.backlog++
	q.queued++
	wake := q.idle
	q.idle = false
	q.mu.Unlock()
	if wake {
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
}

// waitForRoom is the slow path of Call when the backlog is full. It returns
// true with q.mu held when the callback may be queued, or false with q.mu
// released when the caller must run it inline.
func (d *Domain) waitForRoom() bool {
	q := &d.cb
	gid := goroutine.ID()
	if gid == q.gid {
		q.overflow++
		return true // a callback queueing more: waiting would deadlock the worker
	}
	if d.onlineTask(gid) != nil {
		// An online task that waited for room would hold the very grace
		// period the worker needs to make room: exceed the bound instead.
		q.overflow++
		return true
	}
	if d.cfg.inlineGP {
		q.mu.Unlock()
		return false
	}
	q.waits++
	for q.backlog >= d.cfg.backlog && !q.closing {
		q.waiters++
		q.room.Wait()
		q.waiters--
	}
	if q.closing {
		q.mu.Unlock()
		panic("rcu: Call on a closed domain")
	}
	return true
}

// onlineTask returns the online task of d that goroutine gid runs, or nil.
func (d *Domain) onlineTask(gid int64) *Task {
	d.tasksMu.Lock()
	defer d.tasksMu.Unlock()
	for t := range d.tasks {
		if t.gid == gid && t.state.Load()&(stateOffline|stateDead) == 0 {
			return t
		}
	}
	return nil
}

// Barrier waits until every callback queued by [Domain.Call] before Barrier
// was called has run (the kernel's rcu_barrier). Callbacks queued later are
// not waited for. It must not be called from a callback or inside a read
// section of the domain.
func (d *Domain) Barrier(ctx context.Context) error {
	d.checkBlockingAllowed("Barrier")
	q := &d.cb
	q.mu.Lock()
	if goroutine.ID() == q.gid {
		q.mu.Unlock()
		panic("rcu: Barrier called from a callback: it would wait for itself")
	}
	ticket := q.queued
	for q.invoked < ticket {
		if q.progress == nil {
			q.progress = make(chan struct{})
		}
		ch := q.progress
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-d.closing:
			return ErrClosed
		}
		q.mu.Lock()
	}
	q.mu.Unlock()
	return nil
}

// callbackWorker takes the pending callbacks as one segment, waits for a
// grace period that began after all of them were queued, and invokes them
// in batches. Callbacks queued meanwhile form the next segment.
func (d *Domain) callbackWorker(started chan<- struct{}) {
	defer d.wg.Done()
	q := &d.cb
	defer close(q.exited)
	q.mu.Lock()
	q.gid = goroutine.ID()
	q.mu.Unlock()
	close(started)
	for {
		q.mu.Lock()
		for len(q.pending) == 0 {
			if q.closing {
				q.room.Broadcast()
				q.mu.Unlock()
				return
			}
			q.idle = true
			q.mu.Unlock()
			<-q.kick
			q.mu.Lock()
		}
		q.idle = false
		seg := q.pending
		q.pending, q.spare = q.spare[:0], nil
		q.mu.Unlock()

		// The segment was queued before this call; a grace period that
		// starts now covers every section and task that might still hold
		// what the callbacks free. Close does not interrupt it: Close
		// promises that queued callbacks run.
		if err := d.synchronize(context.Background()); err != nil {
			// Only ErrClosed, which cannot happen before the worker exits.
			panic("rcu: callback worker: " + err.Error())
		}
		for i := 0; i < len(seg); i += d.cfg.batch {
			end := min(i+d.cfg.batch, len(seg))
			for j := i; j < end; j++ {
				fn := seg[j]
				seg[j] = nil
				fn()
			}
			q.mu.Lock()
			q.backlog -= end - i
			q.invoked += uint64(end - i)
			if q.progress != nil {
				close(q.progress)
				q.progress = nil
			}
			waiting := q.waiters > 0
			if waiting {
				q.room.Broadcast()
			}
			crowded := q.backlog >= d.cfg.backlog/2
			q.mu.Unlock()
			// Between batches the worker lets others run, unless callers
			// are blocked for room in the backlog (or soon will be): they
			// wait for this worker and nothing else, and a yield would
			// put it behind every runnable goroutine, each of which Go
			// may let run 10 ms.
			if !waiting && !crowded {
				runtime.Gosched()
			}
		}
		q.mu.Lock()
		if cap(seg) <= 2*d.cfg.backlog {
			q.spare = seg[:0] // reuse, unless a burst left it oversized
		}
		q.mu.Unlock()
	}
}
