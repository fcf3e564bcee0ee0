package rcu

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Grace-period phases. Only the driver (the goroutine holding the driving
// token) advances them; they live in the domain rather than on a stack so
// that a driver whose context is cancelled can hand a half-done grace
// period to the background driver, which resumes it where it stopped.
const (
	phaseIdle     uint32 = iota
	phaseInactive        // waiting for stragglers on the inactive index
	phaseActive          // flipped; waiting for the old index to drain
	phaseTasks           // waiting for the last task holdout
)

var phaseNames = [...]string{"idle", "read sections", "read sections", "tasks"}

// gpEngine is the grace-period state. The sequence number follows the
// kernel's rcu_seq convention: it is twice the number of completed grace
// periods, plus one while a grace period runs.
type gpEngine struct {
	mu        sync.Mutex
	seq       uint64
	requested uint64 // highest sequence number someone waits for
	driving   bool   // someone holds the driving token
	// curDone closes when the running grace period (or, when idle, the next
	// one to start) ends; nextDone when the one after it ends.
	curDone, nextDone chan struct{}
	started           time.Time
	completed         uint64
	hist              *hdrhistogram.Histogram
	stallReports      int // reports issued for the running grace period

	seqA        atomic.Uint64 // mirror of seq for lock-free Done and politeness
	startedNano atomic.Int64  // when the running grace period began, for politeness
	phase       atomic.Uint32
	bgKick      chan struct{} // hands the driving token to the background driver
	stallTm     *time.Timer
}

func (g *gpEngine) init() {
	g.curDone = make(chan struct{})
	g.nextDone = make(chan struct{})
	g.hist = hdrhistogram.New(1, int64(time.Hour), 3)
	g.bgKick = make(chan struct{}, 1)
	g.stallTm = time.NewTimer(time.Hour)
	g.stallTm.Stop()
}

// snap returns the sequence number at which a grace period that starts
// after now will have completed (the kernel's rcu_seq_snap).
func snap(seq uint64) uint64 { return (seq + 3) &^ 1 }

// Cookie identifies a grace period for polling: Done(c) reports whether it
// has completed. Cookies compare in order of the grace periods they name.
type Cookie uint64

func (d *Domain) gpInProgress() bool { return d.gp.seqA.Load()&1 != 0 }

// Synchronize waits until a full grace period has elapsed: every read
// section that began before the call has ended, and every task that was
// online when it was called has passed a quiescent state, gone offline or
// unregistered. Concurrent callers share grace periods. It returns early
// with ctx's error if ctx is done first, and [ErrClosed] if the domain
// closes.
//
// Synchronize must not be called inside a read section of the same domain
// or by an online task of the domain: it would wait for itself. Builds with
// invariants (-race or -tags ukeys_invariants) panic when it is.
func (d *Domain) Synchronize(ctx context.Context) error {
	d.checkBlockingAllowed("Synchronize")
	if d.closed.Load() {
		return ErrClosed
	}
	return d.synchronize(ctx)
}

// synchronize is Synchronize without the checks, for the domain's own
// callback worker, which must keep working while Close drains it.
func (d *Domain) synchronize(ctx context.Context) error {
	d.gp.mu.Lock()
	return d.awaitLocked(ctx, snap(d.gp.seq), true)
}

// Start returns a cookie for a grace period that begins after the call and
// makes sure that grace period runs, without blocking (the kernel's
// start_poll_synchronize_rcu). Poll it with [Domain.Done] or wait with
// [Domain.Wait].
func (d *Domain) Start() Cookie {
	if d.closed.Load() {
		panic("rcu: Start on a closed domain")
	}
	d.gp.mu.Lock()
	target := snap(d.gp.seq)
	d.requestLocked(target)
	if !d.gp.driving {
		d.gp.driving = true
		d.gp.mu.Unlock()
		d.kickBackground()
		return Cookie(target)
	}
	d.gp.mu.Unlock()
	return Cookie(target)
}

// Snapshot returns a cookie for a grace period that begins after the call
// without starting one (the kernel's get_state_synchronize_rcu):
// [Domain.Done] turns true once some other caller has driven such a grace
// period.
func (d *Domain) Snapshot() Cookie { return Cookie(snap(d.gp.seqA.Load())) }

// Done reports whether the grace period named by c has completed. It never
// blocks and costs one atomic load.
func (d *Domain) Done(c Cookie) bool { return d.gp.seqA.Load() >= uint64(c) }

// Wait blocks until the grace period named by c has completed, driving it
// if nobody else is.
func (d *Domain) Wait(ctx context.Context, c Cookie) error {
	d.checkBlockingAllowed("Wait")
	if d.Done(c) {
		return nil
	}
	if d.closed.Load() {
		return ErrClosed
	}
	d.gp.mu.Lock()
	return d.awaitLocked(ctx, uint64(c), true)
}

func (d *Domain) requestLocked(target uint64) {
	if target > d.gp.requested {
		d.gp.requested = target
	}
}

// awaitLocked waits for the grace-period sequence to reach target. Called
// with gp.mu held; releases it. If nobody drives grace periods and
// mayDrive is set, the caller drives them itself: on an idle domain this
// avoids waking any other goroutine at all.
func (d *Domain) awaitLocked(ctx context.Context, target uint64, mayDrive bool) error {
	g := &d.gp
	if g.seq >= target {
		g.mu.Unlock()
		return nil
	}
	d.requestLocked(target)
	ch := g.curDone
	if g.seq&1 == 1 && target > g.seq+1 {
		ch = g.nextDone
	}
	if !g.driving {
		g.driving = true
		g.mu.Unlock()
		if mayDrive {
			return d.driveUntil(ctx, target)
		}
		d.kickBackground()
	} else {
		g.mu.Unlock()
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-d.closing:
		return ErrClosed
	}
}

// driveUntil runs grace periods while holding the driving token until the
// sequence reaches target, then passes the token on: to nobody if no more
// grace periods are wanted, else to the background driver.
func (d *Domain) driveUntil(ctx context.Context, target uint64) error {
	g := &d.gp
	for {
		err := d.runGP(ctx)
		g.mu.Lock()
		if err == nil && g.seq < target {
			g.mu.Unlock()
			continue
		}
		more := g.requested > g.seq || g.phase.Load() != phaseIdle
		if !more {
			g.driving = false
		}
		g.mu.Unlock()
		if more {
			d.kickBackground()
		}
		return err
	}
}

func (d *Domain) kickBackground() {
	select {
	case d.gp.bgKick <- struct{}{}:
	default:
	}
}

// background drives grace periods on behalf of Start, callers whose
// context ended mid grace period, and followers left waiting when a
// caller-driver finished its own.
func (d *Domain) background() {
	defer d.wg.Done()
	g := &d.gp
	for {
		select {
		case <-g.bgKick:
		case <-d.stopCtx.Done():
			return
		}
		for {
			g.mu.Lock()
			if g.seq >= g.requested && g.phase.Load() == phaseIdle {
				g.driving = false
				g.mu.Unlock()
				break
			}
			g.mu.Unlock()
			if err := d.runGP(d.stopCtx); err != nil {
				return // closing: waiters are released by d.closing
			}
		}
	}
}

// runGP advances the grace period from its current phase to its end.
func (d *Domain) runGP(ctx context.Context) error {
	g := &d.gp
	switch g.phase.Load() {
	case phaseIdle:
		d.beginGP()
		fallthrough
	case phaseInactive:
		// A section that read the epoch before the previous flip may have
		// counted itself against what is now the inactive index; wait for
		// such stragglers before flipping back to it.
		if err := d.awaitSections(ctx, (d.epoch.Load()&1)^1); err != nil {
			return err
		}
		d.epoch.Add(1)
		g.phase.Store(phaseActive)
		fallthrough
	case phaseActive:
		if err := d.awaitSections(ctx, (d.epoch.Load()&1)^1); err != nil {
			return err
		}
		g.phase.Store(phaseTasks)
		fallthrough
	case phaseTasks:
		if err := d.await(ctx, func() bool { return d.holdouts.Load() == 0 }); err != nil {
			return err
		}
	}
	d.endGP()
	return nil
}

func (d *Domain) beginGP() {
	g := &d.gp
	g.mu.Lock()
	g.seq++
	g.seqA.Store(g.seq)
	g.started = time.Now()
	g.startedNano.Store(g.started.UnixNano())
	g.stallReports = 0
	if d.cfg.stallTimeout > 0 {
		g.stallTm.Reset(d.cfg.stallTimeout)
	}
	g.phase.Store(phaseInactive)
	g.mu.Unlock()
	d.markTasks()
}

func (d *Domain) endGP() {
	g := &d.gp
	g.mu.Lock()
	g.seq++
	g.seqA.Store(g.seq)
	g.stallTm.Stop()
	g.completed++
	_ = g.hist.RecordValue(time.Since(g.started).Nanoseconds())
	close(g.curDone)
	g.curDone, g.nextDone = g.nextDone, make(chan struct{})
	g.phase.Store(phaseIdle)
	g.mu.Unlock()
}

func (d *Domain) awaitSections(ctx context.Context, idx uint32) error {
	d.waitIdx.Store(idx + 1)
	err := d.await(ctx, func() bool { return d.drained(idx) })
	d.waitIdx.Store(0)
	return err
}

// await waits until cond holds. It first polls, yielding the processor
// between polls so that the holdouts it waits for can run; then it parks
// until a holdout wakes it. No fixed sleep is involved: a grace period
// lasts as long as its slowest holdout and not a tick longer.
func (d *Domain) await(ctx context.Context, cond func() bool) error {
	for spins := 0; ; spins++ {
		if cond() {
			return nil
		}
		if spins < d.cfg.spin {
			runtime.Gosched()
			continue
		}
		select {
		case <-d.kick:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// wake tells the driver that a condition it waits for may now hold.
func (d *Domain) wake() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}
