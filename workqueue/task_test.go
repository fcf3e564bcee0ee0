package workqueue

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ukeys/ukeys/rcu"
)

// syncCtx bounds a Synchronize that must complete: a liveness limit only.
func syncCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestWorkersAreTasks(t *testing.T) {
	q, d := newQueue(t, WithWorkers(3))
	if n := d.Stats().Tasks; n != 3 {
		t.Fatalf("domain has %d tasks, want 3 workers", n)
	}
	q.Close()
	if n := d.Stats().Tasks; n != 0 {
		t.Fatalf("domain has %d tasks after Close, want 0: workers must unregister", n)
	}
}

func TestIdleQueueDoesNotHoldGracePeriods(t *testing.T) {
	_, d := newQueue(t, WithWorkers(2))
	if err := d.Synchronize(syncCtx(t)); err != nil {
		t.Fatalf("Synchronize with an idle queue: %v", err)
	}
}

func TestRunningItemHoldsGracePeriod(t *testing.T) {
	q, d := newQueue(t, WithWorkers(2))
	b := newBlocker()
	q.Schedule(NewWork("reader", b.run))
	receive(t, "the item", b.started)
	done := make(chan error, 1)
	go func() { done <- d.Synchronize(syncCtx(t)) }()
	stillBlocked(t, "Synchronize while an item runs on an online worker", done)
	b.open()
	if err := receive(t, "Synchronize", done); err != nil {
		t.Fatal(err)
	}
}

func TestBusyQueuePassesQuiescentStates(t *testing.T) {
	// Eight items that keep scheduling themselves keep both workers busy:
	// the line never empties, so no worker ever goes offline to sleep.
	// Grace periods must still complete, through the quiescent states the
	// workers report between items.
	q, d := newQueue(t, WithWorkers(2))
	var stop atomic.Bool
	var runs atomic.Int64
	works := make([]*Work, 8)
	for i := range works {
		works[i] = NewWork("spinner", func() {
			runs.Add(1)
			if !stop.Load() {
				q.Schedule(works[i])
			}
		})
	}
	for _, w := range works {
		q.Schedule(w)
	}
	eventually(t, "the queue to get busy", func() bool { return runs.Load() > 100 })
	q.mu.Lock()
	sleeps := q.sleeps
	q.mu.Unlock()
	for range 3 {
		if err := d.Synchronize(syncCtx(t)); err != nil {
			t.Fatalf("Synchronize with a busy queue: %v", err)
		}
	}
	q.mu.Lock()
	slept := q.sleeps - sleeps
	q.mu.Unlock()
	stop.Store(true)
	if slept != 0 {
		t.Fatalf("workers went idle %d times: the test did not keep the queue busy", slept)
	}
}

// An item that loops and checkpoints on its worker's task lets a grace
// period through mid-run; the same loop without checkpoints holds it.
func TestTaskWorkCheckpointsReleaseGracePeriods(t *testing.T) {
	q, d := newQueue(t, WithWorkers(1))
	inLoop := make(chan struct{})
	stop := make(chan struct{})
	var once sync.Once
	w := NewTaskWork("looper", func(tk *rcu.Task) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			once.Do(func() { close(inLoop) })
			tk.Checkpoint()
		}
	})
	q.Schedule(w)
	<-inLoop
	if err := d.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(stop)
	if _, err := q.FlushWork(context.Background(), w); err != nil {
		t.Fatal(err)
	}
}
