package rcu

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/ukeys/ukeys/internal/latency"
)

// ErrClosed is returned by blocking operations on a domain that has been
// closed.
var ErrClosed = errors.New("rcu: domain closed")

// Domain is one independent RCU instance: its grace periods wait only for
// its own read sections and tasks. The zero value is not usable; create
// domains with [New] and stop them with [Domain.Close].
type Domain struct {
	// Read-side hot words, each on its own cache line.
	epoch   atomic.Uint32 // low bit: the index new sections count against
	_       [124]byte
	waitIdx atomic.Uint32 // 1+idx while a grace period waits for index idx to drain
	_       [124]byte

	shards    []shard
	shardMask uint

	cfg config

	// kick wakes the grace-period driver when a condition it waits for may
	// have become true: a shard drained, the last holdout reported.
	kick chan struct{}

	tasksMu  sync.Mutex
	tasks    map[*Task]struct{}
	holdouts atomic.Int64

	// owners tracks which goroutines hold sections; only with invariants.
	ownersMu sync.Mutex
	owners   map[int64]int

	gp gpEngine
	cb callbacks

	stalls  atomic.Uint64
	closed  atomic.Bool
	closing chan struct{} // closed by Close
	stopCtx context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// New creates a domain and starts its goroutines: a grace-period driver that
// serves [Domain.Start] and hand-offs, a callback worker, and a stall
// watcher.
func New(opts ...Option) *Domain {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	n := shardCount()
	d := &Domain{
		shards:    make([]shard, n),
		shardMask: uint(n - 1),
		cfg:       cfg,
		kick:      make(chan struct{}, 1),
		tasks:     make(map[*Task]struct{}),
		owners:    make(map[int64]int),
		closing:   make(chan struct{}),
	}
	d.stopCtx, d.stop = context.WithCancel(context.Background())
	d.gp.init()
	d.cb.init()
	d.wg.Add(3)
	go d.background()
	go d.stallWatcher()
	workerStarted := make(chan struct{})
	go d.callbackWorker(workerStarted)
	<-workerStarted
	return d
}

// Name returns the domain's name.
func (d *Domain) Name() string { return d.cfg.name }

// Close runs every callback queued before it (after the grace period they
// wait for), then stops all goroutines the domain started.
// [Domain.Synchronize] and [Domain.Barrier] calls still waiting when Close
// finishes return [ErrClosed]. [Domain.Call] and [Domain.Start] panic on a
// closed domain. Close is idempotent.
func (d *Domain) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return nil
	}
	d.cb.close()
	<-d.cb.exited
	close(d.closing)
	d.stop()
	d.wg.Wait()
	return nil
}

// Latency summarises a distribution of durations: count, min, mean,
// p50, p99, p99.9 and max.
type Latency = latency.Summary

// Stats is a snapshot of a domain's counters.
type Stats struct {
	// GracePeriods is the number of grace periods completed.
	GracePeriods uint64
	// GracePeriodLatency summarises how long grace periods took, from the
	// moment each began until its last holdout reported.
	GracePeriodLatency Latency
	// CallbacksQueued counts callbacks accepted by Call; CallbacksInvoked
	// those that have run (including ones run inline when the backlog was
	// full); CallbackBacklog those queued and not yet run.
	CallbacksQueued  uint64
	CallbacksInvoked uint64
	CallbackBacklog  int
	// CallbacksInline counts callbacks that Call ran itself after an inline
	// grace period because the backlog was full (WithInlineGracePeriod).
	CallbacksInline uint64
	// CallWaits counts Call invocations that waited for backlog room.
	CallWaits uint64
	// CallOverflows counts Calls from callbacks or online tasks queued
	// beyond the backlog bound, because waiting would have deadlocked.
	CallOverflows uint64
	// Stalls counts stall reports issued.
	Stalls uint64
	// Tasks is the number of registered tasks.
	Tasks int
}

// Stats returns a snapshot of the domain's counters.
func (d *Domain) Stats() Stats {
	var s Stats
	d.gp.mu.Lock()
	s.GracePeriods = d.gp.completed
	s.GracePeriodLatency = latency.Of(d.gp.hist)
	d.gp.mu.Unlock()
	d.cb.mu.Lock()
	s.CallbacksQueued = d.cb.queued + d.cb.inline
	s.CallbacksInvoked = d.cb.invoked + d.cb.inline
	s.CallbackBacklog = d.cb.backlog
	s.CallbacksInline = d.cb.inline
	s.CallWaits = d.cb.waits
	s.CallOverflows = d.cb.overflow
	s.CallOverflows = d.cb.overflow
	d.cb.mu.Unlock()
	s.Stalls = d.stalls.Load()
	d.tasksMu.Lock()
	s.Tasks = len(d.tasks)
	d.tasksMu.Unlock()
	return s
}

func (d *Domain) logger() *slog.Logger {
	if d.cfg.logger != nil {
		return d.cfg.logger
	}
	return slog.Default()
}
