package rcu

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestCallRunsAfterGracePeriod(t *testing.T) {
	d := newDomain(t)
	end := holdSection(d)
	ran := make(chan struct{})
	d.Call(func() { close(ran) })
	stillBlocked(t, "callback while a section that predates it is open", ran)
	end()
	receive(t, "ran", ran)
}

func TestCallbacksRunInOrder(t *testing.T) {
	d := newDomain(t, WithCallbackBatch(7))
	var got []int
	for i := range 1000 {
		d.Call(func() { got = append(got, i) }) // only the worker touches got
	}
	if err := d.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("callback %d ran in position %d", v, i)
		}
	}
	if len(got) != 1000 {
		t.Fatalf("%d callbacks ran, want 1000", len(got))
	}
}

func TestBarrierWaitsForEarlierCallbacksOnly(t *testing.T) {
	d := newDomain(t)
	var earlier atomic.Int32
	end := holdSection(d)
	d.Call(func() { earlier.Add(1) })
	barrier := make(chan error, 1)
	go func() { barrier <- d.Barrier(context.Background()) }()
	stillBlocked(t, "Barrier while an earlier callback waits for its grace period", barrier)
	// The first callback's grace period has flipped the epoch and waits for
	// the held section. A section opened now counts against the new epoch:
	// it holds the later callback but must not hold the Barrier.
	eventually(t, "the callback's grace period to wait for the held section",
		func() bool { return d.gp.phase.Load() == phaseActive })
	endLater := holdSection(d)
	later := make(chan struct{})
	d.Call(func() { close(later) })
	end()
	if err := receive(t, "barrier", barrier); err != nil {
		t.Fatal(err)
	}
	if earlier.Load() != 1 {
		t.Fatal("Barrier returned before the earlier callback ran")
	}
	stillBlocked(t, "the later callback, held by a section opened after its predecessor's grace period began", later)
	endLater()
	receive(t, "later", later)
}

func TestCallbackMayCallCall(t *testing.T) {
	d := newDomain(t, WithCallbackBacklog(4))
	var n atomic.Int32
	var chain func()
	chain = func() {
		if n.Add(1) < 100 {
			d.Call(chain)
			d.Call(func() { n.Add(0) })
		}
	}
	d.Call(chain)
	eventually(t, "a chain of 100 callbacks", func() bool { return n.Load() == 100 })
	if err := d.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Millions of callbacks from several goroutines: the backlog never exceeds
// its bound, memory stays flat, and grace periods keep completing.
func TestCallbackFloodStaysBounded(t *testing.T) {
	const bound = 4096
	total := 2_000_000
	if testing.Short() {
		total = 200_000
	}
	d := newDomain(t, WithCallbackBacklog(bound))
	var invoked atomic.Int64
	var maxBacklog atomic.Int64
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if b := int64(d.Stats().CallbackBacklog); b > maxBacklog.Load() {
				maxBacklog.Store(b)
			}
			runtime.Gosched()
		}
	}()
	var ms0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	gp0 := d.Stats().GracePeriods
	var wg sync.WaitGroup
	const producers = 4
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range total / producers {
				d.Call(func() { invoked.Add(1) })
			}
		}()
	}
	wg.Wait()
	if err := d.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(stop)
	watch.Wait()
	var ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	st := d.Stats()
	if invoked.Load() != int64(total) || st.CallbacksInvoked != uint64(total) || st.CallbackBacklog != 0 {
		t.Fatalf("invoked %d, stats %+v; want %d invoked and an empty backlog", invoked.Load(), st, total)
	}
	if maxBacklog.Load() > bound {
		t.Fatalf("backlog reached %d, bound is %d", maxBacklog.Load(), bound)
	}
	if st.CallWaits == 0 {
		t.Fatal("no Call ever waited for room: the flood did not exercise backpressure")
	}
	if gps := st.GracePeriods - gp0; gps < uint64(total/bound) {
		t.Fatalf("only %d grace periods for %d callbacks with a backlog of %d", gps, total, bound)
	}
	// Heap after the flood: what the bounded backlog and its recycled
	// slices need, not what two million closures would.
	if grown := int64(ms1.HeapInuse) - int64(ms0.HeapInuse); grown > 32<<20 {
		t.Fatalf("heap in use grew by %d MiB over the flood", grown>>20)
	}
}

func TestInlineGracePeriodWhenFull(t *testing.T) {
	d := newDomain(t, WithCallbackBacklog(1), WithInlineGracePeriod())
	end := holdSection(d)
	d.Call(func() {}) // fills the backlog; held by the section
	ran := make(chan struct{})
	go d.Call(func() { close(ran) }) // full: waits for a grace period itself
	stillBlocked(t, "inline callback while the section holds grace periods", ran)
	end()
	receive(t, "ran", ran)
	if err := d.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.CallbacksInline != 1 || st.CallbacksInvoked != 2 {
		t.Fatalf("stats = %+v, want 1 inline and 2 invoked", st)
	}
}

func TestCallWaitsForRoomWhenFull(t *testing.T) {
	d := newDomain(t, WithCallbackBacklog(2))
	end := holdSection(d)
	d.Call(func() {})
	d.Call(func() {})
	queued := make(chan struct{})
	go func() { d.Call(func() {}); close(queued) }()
	stillBlocked(t, "Call with a full backlog", queued)
	end()
	receive(t, "queued", queued)
	if err := d.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestCloseRunsQueuedCallbacks(t *testing.T) {
	d := New()
	var n atomic.Int32
	for range 100 {
		d.Call(func() { n.Add(1) })
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 100 {
		t.Fatalf("%d of 100 callbacks ran before Close returned", n.Load())
	}
}

func TestValueRetiresAfterReaders(t *testing.T) {
	d := newDomain(t)
	type blob struct{ data []byte }
	v := NewValue(d, &blob{data: []byte("first")}, func(b *blob) { clear(b.data) })
	s1 := make(chan *blob)
	release := make(chan struct{})
	seen := make(chan string)
	go func() {
		s := d.Read()
		b := v.Load()
		s1 <- b
		<-release
		seen <- string(b.data) // still inside the section
		s.End()
	}()
	old := receive(t, "s1", s1)
	v.Store(&blob{data: []byte("second")})
	if !v.CompareAndSwap(v.Load(), &blob{data: []byte("third")}) {
		t.Fatal("CompareAndSwap with the current version failed")
	}
	if v.CompareAndSwap(old, &blob{}) {
		t.Fatal("CompareAndSwap with a stale version succeeded")
	}
	v.Update(func(cur *blob) *blob { return &blob{data: append([]byte(nil), cur.data...)} })
	close(release)
	if got := receive(t, "seen", seen); got != "first" {
		t.Fatalf("reader saw %q, want the version it loaded intact", got)
	}
	if err := d.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	if string(old.data) != "\x00\x00\x00\x00\x00" {
		t.Fatalf("retired version not wiped after the grace period: %q", old.data)
	}
	s := d.Read()
	if got := string(v.Load().data); got != "third" {
		t.Fatalf("current version %q, want third", got)
	}
	s.End()
}

func TestCallbacksMayQueueWhileClosing(t *testing.T) {
	d := New()
	var n atomic.Int32
	var chain func()
	chain = func() {
		if n.Add(1) < 10 {
			d.Call(chain)
		}
	}
	d.Call(chain)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 10 {
		t.Fatalf("chain ran %d times before Close returned, want 10", n.Load())
	}
}

// An online task calling Call on a full backlog must not wait: the
// grace period that would free room waits for the task itself.
func TestCallFromOnlineTaskOnFullBacklog(t *testing.T) {
	d := newDomain(t, WithCallbackBacklog(1))
	end := holdSection(d)
	d.Call(func() {}) // fills the backlog, held by the section
	done := make(chan struct{})
	go func() {
		tk := d.Register("caller-task")
		d.Call(func() {}) // must return although the backlog is full
		tk.Unregister()
		close(done)
	}()
	receive(t, "done", done)
	end()
	if err := d.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.CallOverflows != 1 || st.CallbacksInvoked != 2 {
		t.Fatalf("stats %+v, want one overflow and two callbacks run", st)
	}
}
