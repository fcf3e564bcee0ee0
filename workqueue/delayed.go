package workqueue

import "time"

// ScheduleAfter queues w to run after delay (the kernel's
// queue_delayed_work). A delay of zero or less queues it at once, as
// [Queue.Schedule] does. If w is already pending, queued or delayed, it does
// nothing and returns false; use [Queue.Reschedule] to change the delay of a
// pending item.
//
// A delayed item becomes runnable when its timer fires; from then on it
// waits for a worker like any other. [Queue.Close] does not wait for timers:
// it makes every delayed item runnable at once so that nothing scheduled is
// lost.
func (q *Queue) ScheduleAfter(w *Work, delay time.Duration) bool {
	if w.pending.Load() && w.q.Load() == q {
		q.rejected.Add(1)
		return false
	}
	ok, _ := q.enqueue(w, delay, false)
	return ok
}

// Reschedule sets w to run after delay whether or not it is pending (the
// kernel's mod_delayed_work): a pending instance, queued or delayed, gets
// the new delay, which can pull a distant run earlier or push a near one
// back; otherwise a new instance is scheduled. A delay of zero or less
// makes w runnable now (an item that is already runnable keeps its place
// in line). It returns whether w was pending.
//
// Reschedule does nothing when [Queue.Schedule] would refuse: after
// [Queue.Close] has begun, or while a [Queue.Cancel] of w is waiting for its
// run to end.
func (q *Queue) Reschedule(w *Work, delay time.Duration) bool {
	_, was := q.enqueue(w, delay, true)
	return was
}

// delayTimer is the timer of one delayed item. A timer whose Stop fails
// has already started its function; the item then gets a new delayTimer,
// and the old one finds itself stale when it runs. Comparing pointers is
// what lets a stopped timer be reused without ever acting on a stale fire.
type delayTimer struct {
	q *Queue
	w *Work
	t *time.Timer // written under q.mu after AfterFunc returns; fire never reads it
}

// arm starts w's timer. Every arm is matched by exactly one timers.Done:
// by disarm when Stop succeeds, otherwise by fire. That is how Close knows
// that no timer function of this queue is still running.
func (q *Queue) arm(w *Work, delay time.Duration) {
	if w.dt != nil && w.dt.q != q {
		w.dt = nil // left behind by the queue w belonged to before
	}
	q.timers.Add(1)
	if w.dt == nil {
		dt := &delayTimer{q: q, w: w}
		w.dt = dt
		dt.t = time.AfterFunc(delay, dt.fire)
	} else {
		w.dt.t.Reset(delay)
	}
	w.place = onDelayed
	q.delayed.push(w)
}

// disarm stops w's timer. The caller has taken w off q.delayed.
func (q *Queue) disarm(w *Work) {
	if w.dt.t.Stop() {
		q.timers.Done()
		return
	}
	w.dt = nil // fire is on its way and will find itself stale
}

// expedite makes a delayed item runnable now.
func (q *Queue) expedite(w *Work) {
	q.delayed.remove(w)
	q.disarm(w)
	q.makeRunnable(w, time.Now())
}

func (dt *delayTimer) fire() {
	q, w := dt.q, dt.w
	defer q.timers.Done()
	q.mu.Lock()
	if w.q.Load() == q && w.dt == dt && w.place == onDelayed {
		q.delayed.remove(w)
		// The wait histogram starts here: the item became runnable when
		// its delay expired, not when it was scheduled.
		q.makeRunnable(w, time.Now())
	}
	q.mu.Unlock()
}
