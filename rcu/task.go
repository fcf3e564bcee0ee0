package rcu

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/ukeys/ukeys/internal/goroutine"
)

// politeAfter is how old a grace period must be before tasks that have
// already reported yield at their checkpoints, so that the holdouts it
// still waits for get a processor.
const politeAfter = 200 * time.Microsecond

// Task states. A task's state word is zero exactly when it is online and no
// grace period wants anything from it, which is what makes Checkpoint one
// atomic load and a branch.
const (
	stateNeed    = 1 << iota // a grace period waits for this task's quiescent state
	statePolite              // a grace period is running: yield at checkpoints
	stateOffline             // in an extended quiescent state
	stateDead                // unregistered
)

// Task is a long-lived goroutine registered with a domain, in the style of
// liburcu's QSBR flavour and the kernel's Tasks RCU. A task has no read
// sections: everything it does between two quiescent states is protected,
// and a grace period waits until every task that was online when it began
// has passed a quiescent state ([Task.Quiescent] or [Task.Checkpoint]), gone
// offline, or unregistered.
//
// A Task belongs to the goroutine that registered it; its methods must be
// called from that goroutine.
type Task struct {
	state atomic.Uint32
	_     [60]byte // keep the hot word on a line of its own
	d     *Domain
	name  string
	gid   int64
}

// Register registers the calling goroutine as a task named name (the name
// appears in stall reports). The task starts online. A grace period that
// is already running does not wait for it.
func (d *Domain) Register(name string) *Task {
	t := &Task{d: d, name: name, gid: goroutine.ID()}
	d.tasksMu.Lock()
	d.tasks[t] = struct{}{}
	d.tasksMu.Unlock()
	return t
}

// Name returns the name the task was registered with.
func (t *Task) Name() string { return t.name }

// Checkpoint reports a quiescent state if a grace period is waiting for
// one, and then yields the processor so that other tasks that are runnable
// but not running get their turn to report (as the kernel's
// cond_resched_tasks_rcu_qs does). When no grace period is waiting it costs
// one atomic load and a branch, so long loops call it every iteration.
func (t *Task) Checkpoint() {
	if t.state.Load() != 0 {
		t.slow(true)
	}
}

// Quiescent reports a quiescent state if a grace period is waiting for one,
// without yielding. It is as cheap as [Task.Checkpoint] when none is.
func (t *Task) Quiescent() {
	if t.state.Load() != 0 {
		t.slow(false)
	}
}

// slow handles every non-zero state: reporting, politeness and misuse.
func (t *Task) slow(yield bool) {
	for {
		s := t.state.Load()
		switch {
		case s == 0:
			return // the grace period ended meanwhile
		case s&stateDead != 0:
			panic("rcu: task " + t.name + " reported a quiescent state after Unregister")
		case s&stateOffline != 0:
			panic("rcu: task " + t.name + " reported a quiescent state while offline; call Online first")
		case s&stateNeed != 0:
			if !t.state.CompareAndSwap(s, s&^stateNeed) {
				continue
			}
			t.d.report()
		case s&statePolite != 0:
			if t.d.gpInProgress() {
				// Yield only for a grace period that is struggling: one
				// that has waited politeAfter for its holdouts. Yielding at
				// every checkpoint of every short grace period would make a
				// busy domain's long loops crawl.
				if yield && time.Now().UnixNano()-t.d.gp.startedNano.Load() > int64(politeAfter) {
					runtime.Gosched()
				}
				return
			}
			if !t.state.CompareAndSwap(s, 0) {
				continue
			}
			return
		}
		break
	}
	if yield {
		runtime.Gosched()
	}
}

// Offline puts the task in an extended quiescent state: grace periods stop
// waiting for it until [Task.Online]. Call it before the task
// blocks for an unbounded time (waiting for work, sleeping, I/O) and do not
// touch rcu-protected data while offline.
func (t *Task) Offline() {
	for {
		s := t.state.Load()
		switch {
		case s&stateDead != 0:
			panic("rcu: Offline on task " + t.name + " after Unregister")
		case s&stateOffline != 0:
			panic("rcu: Offline on task " + t.name + " that is already offline")
		}
		if t.state.CompareAndSwap(s, stateOffline) {
			if s&stateNeed != 0 {
				t.d.report()
			}
			return
		}
	}
}

// Online ends an extended quiescent state begun by [Task.Offline]. Pointers
// read before Offline must be read again.
func (t *Task) Online() {
	for {
		s := t.state.Load()
		switch {
		case s&stateDead != 0:
			panic("rcu: Online on task " + t.name + " after Unregister")
		case s&stateOffline == 0:
			panic("rcu: Online on task " + t.name + " that is already online")
		}
		if t.state.CompareAndSwap(s, 0) {
			return
		}
	}
}

// Unregister removes the task from the domain. Any grace period waiting
// for it stops waiting. Using the task afterwards panics.
func (t *Task) Unregister() {
	s := t.state.Swap(stateDead)
	if s&stateDead != 0 {
		panic("rcu: Unregister on task " + t.name + " twice")
	}
	if s&stateNeed != 0 {
		t.d.report()
	}
	t.d.tasksMu.Lock()
	delete(t.d.tasks, t)
	t.d.tasksMu.Unlock()
}

// markTasks asks every online task for a quiescent state on behalf of the
// grace period that has just begun. The holdout count carries a bias of one
// while marking so that a task reporting at once cannot bring it to zero
// before every task has been counted.
func (d *Domain) markTasks() {
	d.holdouts.Store(1)
	d.tasksMu.Lock()
	for t := range d.tasks {
		for {
			s := t.state.Load()
			if s&(stateOffline|stateDead) != 0 {
				break
			}
			d.holdouts.Add(1)
			if t.state.CompareAndSwap(s, s|stateNeed|statePolite) {
				break
			}
			d.holdouts.Add(-1)
		}
	}
	d.tasksMu.Unlock()
	d.report() // drop the bias
}

// report records one holdout's quiescent state and wakes the grace-period
// driver when it was the last.
func (d *Domain) report() {
	if d.holdouts.Add(-1) == 0 {
		d.wake()
	}
}
