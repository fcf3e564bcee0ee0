package rcu

import (
	"context"
	"flag"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// In the style of liburcu's rcutorture: a writer keeps replacing the object
// readers see, pushing each replaced object down a pipeline one grace period
// at a time before poisoning it and recycling it. Readers record how many
// grace periods old the object they hold has become (its pipeline age). An
// object is unpublished at age 1; a reader that sees age 2 or more, or a
// poisoned object, watched a grace period end while it still held what the
// grace period was meant to protect.

var tortureFor = flag.Duration("rcu.torture", 0, "run TestTorture for this long (default: a short run)")

const torturePipe = 10

type tortureObj struct {
	age    atomic.Int32
	freed  atomic.Bool // the poison: set only once no reader can hold it
	serial uint64
}

type torture struct {
	d        *Domain
	cur      atomic.Pointer[tortureObj]
	stop     atomic.Bool
	freeMu   sync.Mutex
	free     []*tortureObj
	inFlight atomic.Int64 // unpublished, not yet poisoned

	hist       [torturePipe + 1]atomic.Int64
	poisonSeen atomic.Int64
	tooOld     atomic.Int64
	reads      atomic.Int64
	updates    atomic.Int64
	fakeGPs    atomic.Int64

	errOnce sync.Once
	err     error // the first error a torture goroutine met
}

// fail records the first error a torture goroutine met and stops the run.
// The test reports it once the goroutines are done: t.Fatal may only be
// called from the test's own goroutine, and a panic would skip the test's
// cleanups and leak check.
func (tt *torture) fail(err error) {
	tt.errOnce.Do(func() { tt.err = err })
	tt.stop.Store(true)
}

func (tt *torture) alloc(serial uint64) *tortureObj {
	tt.freeMu.Lock()
	defer tt.freeMu.Unlock()
	if n := len(tt.free); n > 0 {
		o := tt.free[n-1]
		tt.free = tt.free[:n-1]
		o.age.Store(0)
		o.freed.Store(false)
		o.serial = serial
		return o
	}
	return &tortureObj{serial: serial}
}

func (tt *torture) poison(o *tortureObj) {
	o.freed.Store(true)
	tt.inFlight.Add(-1)
	tt.freeMu.Lock()
	tt.free = append(tt.free, o)
	tt.freeMu.Unlock()
}

// advance is the pipeline callback: one more grace period has passed.
func (tt *torture) advance(o *tortureObj) {
	if o.age.Add(1) >= torturePipe {
		tt.poison(o)
		return
	}
	tt.d.Call(func() { tt.advance(o) })
}

func (tt *torture) writer(rng *rand.Rand) {
	for serial := uint64(1); !tt.stop.Load(); serial++ {
		o := tt.alloc(serial)
		old := tt.cur.Swap(o)
		tt.updates.Add(1)
		if old == nil {
			continue
		}
		tt.inFlight.Add(1)
		old.age.Store(1)
		if rng.IntN(8) == 0 {
			// The synchronous way: wait, then age it by hand.
			if err := tt.d.Synchronize(context.Background()); err != nil {
				tt.fail(err)
				return
			}
			for old.age.Add(1) < torturePipe {
				if err := tt.d.Synchronize(context.Background()); err != nil {
					tt.fail(err)
					return
				}
			}
			tt.poison(old)
		} else {
			tt.d.Call(func() { tt.advance(old) })
		}
		if rng.IntN(4) == 0 {
			runtime.Gosched()
		}
	}
}

// inspect checks an object held by a reader and records its age.
func (tt *torture) inspect(o *tortureObj, rng *rand.Rand) {
	if o.freed.Load() {
		tt.poisonSeen.Add(1)
	}
	for range rng.IntN(64) {
		if o.freed.Load() {
			tt.poisonSeen.Add(1)
			break
		}
	}
	age := o.age.Load()
	if age >= 2 {
		tt.tooOld.Add(1)
	}
	tt.hist[min(int(age), torturePipe)].Add(1)
	tt.reads.Add(1)
}

func (tt *torture) sectionReader(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	block := make(chan struct{})
	close(block)
	for !tt.stop.Load() {
		s := tt.d.Read()
		if o := tt.cur.Load(); o != nil {
			tt.inspect(o, rng)
			switch rng.IntN(32) {
			case 0:
				runtime.Gosched() // sections may be preempted…
			case 1:
				<-block // …and may block
			case 2:
				inner := tt.d.Read() // …and may nest
				if o2 := tt.cur.Load(); o2 != nil {
					tt.inspect(o2, rng)
				}
				inner.End()
			}
			tt.inspect(o, rng)
		}
		s.End()
	}
}

func (tt *torture) taskReader(name string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 2))
	t := tt.d.Register(name)
	defer t.Unregister()
	for !tt.stop.Load() {
		if o := tt.cur.Load(); o != nil {
			tt.inspect(o, rng)
			tt.inspect(o, rng)
		}
		switch rng.IntN(64) {
		case 0:
			t.Offline()
			time.Sleep(50 * time.Microsecond)
			t.Online()
		case 1, 2:
			t.Quiescent()
		default:
			t.Checkpoint()
		}
	}
}

func (tt *torture) fakeWriter() {
	for !tt.stop.Load() {
		if err := tt.d.Synchronize(context.Background()); err != nil {
			tt.fail(err)
			return
		}
		tt.fakeGPs.Add(1)
	}
}

func (tt *torture) poller() {
	for !tt.stop.Load() {
		c := tt.d.Start()
		for !tt.d.Done(c) && !tt.stop.Load() {
			runtime.Gosched()
		}
	}
}

func TestTorture(t *testing.T) {
	dur := 2 * time.Second
	if testing.Short() {
		dur = 500 * time.Millisecond
	}
	if *tortureFor > 0 {
		dur = *tortureFor
	}
	d := newDomain(t, WithName("torture"), WithCallbackBacklog(1024), WithStallTimeout(10*time.Second))
	tt := &torture{d: d}
	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	run(func() { tt.writer(rand.New(rand.NewPCG(1, 1))) })
	for i := range 4 {
		run(func() { tt.sectionReader(uint64(i)) })
	}
	for i := range 2 {
		run(func() { tt.taskReader("torture-task-"+string(rune('a'+i)), uint64(i)) })
	}
	for range 2 {
		run(tt.fakeWriter)
	}
	run(tt.poller)
	time.Sleep(dur)
	tt.stop.Store(true)
	wg.Wait()
	if tt.err != nil {
		t.Fatalf("torture: %v", tt.err)
	}

	// Drain the pipeline: each callback re-queues itself until its object
	// is poisoned.
	eventually(t, "the pipeline to drain", func() bool {
		if err := d.Barrier(context.Background()); err != nil {
			t.Fatal(err)
		}
		return tt.inFlight.Load() == 0
	})

	st := d.Stats()
	t.Logf("torture %v: %d reads, %d updates, %d grace periods (%d by fake writers), %d stalls",
		dur, tt.reads.Load(), tt.updates.Load(), st.GracePeriods, tt.fakeGPs.Load(), st.Stalls)
	var line []int64
	for i := range tt.hist {
		line = append(line, tt.hist[i].Load())
	}
	t.Logf("reader age histogram (grace periods since unpublished, 0..%d): %v", torturePipe, line)
	t.Logf("grace-period latency: %+v", st.GracePeriodLatency)
	if n := tt.poisonSeen.Load(); n != 0 {
		t.Errorf("readers saw %d poisoned (freed) objects", n)
	}
	if n := tt.tooOld.Load(); n != 0 {
		t.Errorf("readers saw %d objects aged 2 or more grace periods", n)
	}
	if tt.reads.Load() == 0 || tt.updates.Load() < 10 || st.GracePeriods < 10 {
		t.Errorf("torture made too little progress: %d reads, %d updates, %d grace periods",
			tt.reads.Load(), tt.updates.Load(), st.GracePeriods)
	}
}
