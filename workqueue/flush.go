package workqueue

import (
	"context"
	"fmt"

	"github.com/ukeys/ukeys/internal/goroutine"
	"github.com/ukeys/ukeys/internal/invariants"
)

// flushGens counts runnable and running instances by flush generation, in
// the spirit of the kernel's flush colours. An instance belongs to the
// generation that was current when it became runnable and leaves it when
// its run ends (or it is cancelled). Flush closes the current generation
// by opening a new one and waits until every generation up to the closed
// one is empty. Later instances land in newer generations, so an item
// queued after Flush began, however long it runs, never delays it; and
// since counting does not care about order, workers may finish items in
// any order and items scheduled while running may queue behind their run.
type flushGens struct {
	base     uint64        // generation of counts[0]; every older one is empty
	counts   []int         // counts[i]: instances in flight of generation base+i
	inflight int           // sum of counts
	advanced chan struct{} // closed when base moves, if someone waits
}

func (f *flushGens) init() { f.counts = make([]int, 1, 4) }

func (f *flushGens) current() uint64 { return f.base + uint64(len(f.counts)) - 1 }

// next closes the current generation and returns it.
func (f *flushGens) next() uint64 {
	g := f.current()
	f.counts = append(f.counts, 0)
	return g
}

// admit counts a new runnable instance and returns its generation.
func (q *Queue) admit() uint64 {
	f := &q.flush
	f.counts[len(f.counts)-1]++
	f.inflight++
	return f.current()
}

// retire uncounts an instance of generation g whose run ended or that
// was withdrawn before running.
func (q *Queue) retire(g uint64) {
	f := &q.flush
	i := g - f.base
	f.counts[i]--
	f.inflight--
	if invariants.Enabled && (f.counts[i] < 0 || f.inflight < 0) {
		panic(fmt.Sprintf("workqueue: flush generation %d retired more instances than it admitted", g))
	}
	if i != 0 || f.counts[0] != 0 || len(f.counts) == 1 {
		return // the common case: nobody flushes, one generation
	}
	for len(f.counts) > 1 && f.counts[0] == 0 {
		f.counts = f.counts[1:]
		f.base++
	}
	if f.advanced != nil {
		close(f.advanced)
		f.advanced = nil
	}
}

// waitGen waits, with q.mu held (and released while waiting), until every
// instance of generation g and older has finished.
func (q *Queue) waitGen(ctx context.Context, g uint64) error {
	f := &q.flush
	for f.base <= g {
		if f.advanced == nil {
			f.advanced = make(chan struct{})
		}
		ch := f.advanced
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			q.mu.Lock()
			return ctx.Err()
		}
		q.mu.Lock()
	}
	return nil
}

// Flush waits until every item that was runnable (queued, or running with
// an instance queued behind the run) when Flush was called has finished
// running, like the kernel's flush_workqueue. Items queued later are not
// waited for, nor are delayed items whose timer has not yet fired. It
// returns ctx's error if ctx ends first.
//
// Flush panics if called from an item of the queue: it would wait for
// that item, which waits for Flush.
func (q *Queue) Flush(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.flush.inflight == 0 {
		return nil
	}
	if q.onWorkerLocked() {
		panic("workqueue: Flush of queue " + q.cfg.name + " called from one of its items: it would wait for itself")
	}
	return q.waitGen(ctx, q.flush.next())
}

// FlushWork waits until w's pending instance, if any, and its running
// instance, if any, have finished (the kernel's flush_delayed_work). A
// delayed instance is made runnable at once rather than waited for. It
// returns whether it had anything to wait for, and ctx's error if ctx ends
// first.
//
// FlushWork panics if called from w's own function. Called from another
// item of the same queue it may wait forever if no other worker is free to
// run w; avoid that.
func (q *Queue) FlushWork(ctx context.Context, w *Work) (bool, error) {
	if !q.lockIfOwner(w) {
		return false, nil
	}
	defer q.mu.Unlock()
	if w.runner != nil && w.runner.gid == goroutine.ID() {
		panic(fmt.Sprintf("workqueue: FlushWork of work %q called from its own function: it would wait for itself", w.name))
	}
	if w.place == onDelayed {
		q.expedite(w)
	}
	pending := w.pending.Load()
	if !pending && w.runner == nil {
		return false, nil
	}
	// The runs to wait for: the current one and the pending one.
	target := w.runs + 1
	if pending && w.runner != nil {
		target++
	}
	// Stop early if the instance is cancelled or nothing is left; and stop
	// touching w at all if, idle, it has moved to another queue.
	for w.q.Load() == q && w.runs < target && (w.pending.Load() || w.runner != nil) {
		ch := w.wait()
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			q.mu.Lock()
			return true, ctx.Err()
		}
		q.mu.Lock()
	}
	return true, nil
}
