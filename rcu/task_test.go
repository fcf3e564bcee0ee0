package rcu

import (
	"context"
	"sync"
	"testing"
)

// startTask runs a registered task on its own goroutine, executing the
// functions sent to it, so that tests can drive the task step by step from
// the test goroutine.
type taskRunner struct {
	ops  chan func(*Task)
	done chan struct{}
}

func startTask(d *Domain, name string) *taskRunner {
	r := &taskRunner{ops: make(chan func(*Task)), done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(r.done)
		t := d.Register(name)
		close(ready)
		for op := range r.ops {
			op(t)
		}
	}()
	<-ready
	return r
}

// do runs op on the task's goroutine and waits for it.
func (r *taskRunner) do(op func(*Task)) {
	fin := make(chan struct{})
	r.ops <- func(t *Task) { op(t); close(fin) }
	<-fin
}

func (r *taskRunner) stop() { close(r.ops); <-r.done }

func TestTaskHoldsGracePeriodUntilQuiescent(t *testing.T) {
	for _, release := range []struct {
		name string
		fn   func(*Task)
	}{
		{"Checkpoint", (*Task).Checkpoint},
		{"Quiescent", (*Task).Quiescent},
		{"Offline", (*Task).Offline},
		{"Unregister", (*Task).Unregister},
	} {
		t.Run(release.name, func(t *testing.T) {
			d := newDomain(t)
			r := startTask(d, "holder")
			done := syncAsync(d)
			eventually(t, "the grace period to mark the task", func() bool { return d.holdouts.Load() == 1 })
			stillBlocked(t, "Synchronize with an online task that has not reported", done)
			r.do(release.fn)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if release.name == "Offline" {
				r.do((*Task).Online)
				r.do((*Task).Unregister)
			} else if release.name != "Unregister" {
				r.do((*Task).Unregister)
			}
			r.stop()
		})
	}
}

func TestOfflineTaskIsNotWaitedFor(t *testing.T) {
	d := newDomain(t)
	r := startTask(d, "sleeper")
	r.do((*Task).Offline)
	if err := d.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Coming back online, it is waited for again.
	r.do((*Task).Online)
	done := syncAsync(d)
	eventually(t, "the grace period to mark the task", func() bool { return d.holdouts.Load() == 1 })
	stillBlocked(t, "Synchronize with the task back online", done)
	r.do((*Task).Checkpoint)
	if err := receive(t, "done", done); err != nil {
		t.Fatal(err)
	}
	r.do((*Task).Unregister)
	r.stop()
}

func TestTaskRegisteredDuringGracePeriodIsNotWaitedFor(t *testing.T) {
	d := newDomain(t)
	old := startTask(d, "old")
	done := syncAsync(d)
	eventually(t, "the grace period to start", func() bool { return d.gpInProgress() && d.holdouts.Load() == 1 })
	late := startTask(d, "late")
	old.do((*Task).Checkpoint)
	if err := receive(t, "done", done); err != nil {
		t.Fatal(err)
	}
	// The next grace period waits for both.
	done = syncAsync(d)
	eventually(t, "the second grace period to mark both tasks", func() bool { return d.gpInProgress() && d.holdouts.Load() == 2 })
	old.do((*Task).Checkpoint)
	stillBlocked(t, "Synchronize waiting for the late task", done)
	late.do((*Task).Checkpoint)
	if err := receive(t, "done", done); err != nil {
		t.Fatal(err)
	}
	old.do((*Task).Unregister)
	late.do((*Task).Unregister)
	old.stop()
	late.stop()
}

// Busy tasks that checkpoint in a loop let grace periods through, and the
// domain's counters agree with what happened.
func TestBusyTasksCheckpointing(t *testing.T) {
	d := newDomain(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := d.Register("busy-" + string(rune('a'+i)))
			defer tk.Unregister()
			x := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				for j := range 1000 {
					x += j
				}
				tk.Checkpoint()
			}
		}()
	}
	for range 100 {
		if err := d.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	st := d.Stats()
	if st.GracePeriods < 100 || st.Tasks != 0 {
		t.Fatalf("stats after 100 Synchronize and all tasks gone: %+v", st)
	}
	if st.GracePeriodLatency.Count != int64(st.GracePeriods) || st.GracePeriodLatency.Max < st.GracePeriodLatency.P50 {
		t.Fatalf("inconsistent latency summary: %+v", st.GracePeriodLatency)
	}
}
