package rcu

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func syncAsync(d *Domain) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- d.Synchronize(context.Background()) }()
	return ch
}

func TestSectionBeforeGracePeriodHoldsIt(t *testing.T) {
	d := newDomain(t)
	s := d.Read()
	done := syncAsync(d)
	stillBlocked(t, "Synchronize with a section open since before it", done)
	s.End()
	if err := receive(t, "done", done); err != nil {
		t.Fatal(err)
	}
}

func TestNestedSectionsHoldUntilOutermostEnds(t *testing.T) {
	d := newDomain(t)
	outer := d.Read()
	inner := d.Read()
	done := syncAsync(d)
	inner.End()
	stillBlocked(t, "Synchronize with the outer section still open", done)
	again := d.Read() // a new nested section after the grace period began
	outer.End()
	if err := receive(t, "done", done); err != nil {
		t.Fatal(err)
	}
	again.End()
}

func TestSectionMayBlockAndEndOnAnotherProcessor(t *testing.T) {
	d := newDomain(t)
	s := d.Read()
	release := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		<-release
		s.End() // a section may be ended by whoever holds it
		close(ended)
	}()
	done := syncAsync(d)
	stillBlocked(t, "Synchronize while a handed-off section is open", done)
	close(release)
	receive(t, "ended", ended)
	if err := receive(t, "done", done); err != nil {
		t.Fatal(err)
	}
}

// A continuous stream of overlapping readers must not starve writers: new
// sections count against the new epoch.
func TestReadersDoNotStarveGracePeriods(t *testing.T) {
	d := newDomain(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prev := d.Read()
			for {
				select {
				case <-stop:
					prev.End()
					return
				default:
				}
				next := d.Read() // always at least one section open
				prev.End()
				prev = next
			}
		}()
	}
	for range 50 {
		if err := d.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// holdSection opens a read section on a goroutine of its own, as another
// reader would, and returns the function that ends it.
func holdSection(d *Domain) (end func()) {
	opened := make(chan struct{})
	release := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		s := d.Read()
		close(opened)
		<-release
		s.End()
		close(ended)
	}()
	<-opened
	return func() { close(release); <-ended }
}

func TestSynchronizeHonoursContextAndHandsOff(t *testing.T) {
	d := newDomain(t)
	end := holdSection(d)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := d.Synchronize(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Synchronize = %v, want DeadlineExceeded", err)
	}
	// The abandoned grace period is resumed by the background driver: a
	// poller sees it complete once the section ends.
	c := d.Snapshot()
	done := syncAsync(d)
	end()
	if err := receive(t, "done", done); err != nil {
		t.Fatal(err)
	}
	if !d.Done(c) {
		t.Fatal("grace period after the snapshot not reported done")
	}
}

func TestConcurrentSynchronizeShareGracePeriods(t *testing.T) {
	d := newDomain(t)
	before := d.Stats().GracePeriods
	s := d.Read() // holds the first grace period while callers pile up
	const callers = 100
	var entered, wg sync.WaitGroup
	var failed atomic.Int32
	entered.Add(callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			entered.Done()
			if d.Synchronize(context.Background()) != nil {
				failed.Add(1)
			}
		}()
	}
	entered.Wait()
	time.Sleep(10 * time.Millisecond) // let them reach Synchronize
	s.End()
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatal("a Synchronize failed")
	}
	// Callers that arrived during the first grace period share the second;
	// a straggler preempted before calling may add one more.
	if n := d.Stats().GracePeriods - before; n > 3 {
		t.Fatalf("%d concurrent Synchronize calls caused %d grace periods, want at most 3", callers, n)
	}
}

func TestPollingCookies(t *testing.T) {
	d := newDomain(t)
	snapBefore := d.Snapshot()
	if d.Done(snapBefore) {
		t.Fatal("Snapshot cookie done before any grace period")
	}
	s := d.Read()
	c := d.Start()
	stillBlocked(t, "grace period held by a section", waitChan(d, c))
	if d.Done(c) {
		t.Fatal("Done true while a pre-existing section is open")
	}
	s.End()
	eventually(t, "Start's grace period to complete without any waiter", func() bool { return d.Done(c) })
	if !d.Done(snapBefore) {
		t.Fatal("earlier Snapshot cookie not done after a later grace period completed")
	}
	if later := d.Start(); later <= c {
		t.Fatalf("cookie %d not after %d", later, c)
	}
}

func waitChan(d *Domain, c Cookie) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- d.Wait(context.Background(), c) }()
	return ch
}

func TestClosedDomain(t *testing.T) {
	d := New()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Synchronize after Close = %v, want ErrClosed", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	mustPanic(t, "Call on a closed domain", func() { d.Call(func() {}) })
	mustPanic(t, "Start on a closed domain", func() { d.Start() })
}
