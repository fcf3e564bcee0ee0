package keys

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/tuning"
	"github.com/ukeys/ukeys/rcu"
	"github.com/ukeys/ukeys/workqueue"
)

func (e *env) gcNow() {
	e.t.Helper()
	e.s.RequestGC()
	e.settle()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The pass requested runs after any pass in flight: flush the item
	// until it is idle.
	for range 3 {
		if _, err := e.s.gcol.wq.FlushWork(ctx, e.s.gcol.work); err != nil {
			e.t.Fatal(err)
		}
		e.settle()
	}
	e.settle()
}

func TestGCRevokedKey(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	must(c.GetKeyringID(UserKeyring, false))(t)
	k0, b0 := e.s.QuotaUsage(1000)
	id := must(c.AddKey("user", "secret", []byte("payload"), SessionKeyring))(t)

	// A reader holds the payload across the revocation until it lets go.
	k := e.s.lookup(id)
	loaded := make(chan *Payload)
	release := make(chan struct{})
	sawIntact := make(chan bool)
	go func() {
		sec := e.s.Domain().Read()
		p := k.loadPayload()
		loaded <- p
		<-release
		sawIntact <- string(p.Data) == "payload"
		sec.End()
	}()
	held := <-loaded
	noErr(t, c.Revoke(id))
	_, err := c.Read(id)
	wantErr(t, "read after revoke", err, EKEYREVOKED)
	close(release)
	if !<-sawIntact {
		t.Fatal("the reader's payload was wiped while it held it")
	}
	e.settle()
	if string(held.Data) == "payload" {
		t.Fatal("revoked payload not wiped after the reader let go and a grace period passed")
	}
	// Before gc_delay the link stays.
	e.gcNow()
	if got := serials(must(c.Read(SessionKeyring))(t)); len(got) != 1 || got[0] != id {
		t.Fatalf("session holds %v before gc_delay, want the revoked key", got)
	}
	// After gc_delay the link is pruned and the key destroyed.
	e.clock.advance(e.s.Tunables().GCDelay + time.Second)
	e.gcNow()
	if got := serials(must(c.Read(SessionKeyring))(t)); len(got) != 0 {
		t.Fatalf("session still holds %v after gc_delay", got)
	}
	if k1, b1 := e.s.QuotaUsage(1000); k1 != k0 || b1 != b0 {
		t.Fatalf("quota %d/%d after destruction, want %d/%d", k1, b1, k0, b0)
	}
	st := e.s.GCStats()
	if st.Pruned[ReapRevoked] != 1 || st.Destroyed < 1 {
		t.Fatalf("gc stats %+v", st)
	}
}

func TestGCExpiredAndInvalidated(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	ex := must(c.AddKey("user", "ex", []byte("x"), SessionKeyring))(t)
	iv := must(c.AddKey("user", "iv", []byte("x"), SessionKeyring))(t)
	keep := must(c.AddKey("user", "keep", []byte("x"), SessionKeyring))(t)
	noErr(t, c.SetTimeout(ex, 5))
	noErr(t, c.Invalidate(iv))
	e.gcNow()
	got := serials(must(c.Read(SessionKeyring))(t))
	if len(got) != 2 || !containsSerial(got, ex) || !containsSerial(got, keep) {
		t.Fatalf("after invalidation the session holds %v, want %d and %d", got, ex, keep)
	}
	e.clock.advance(5*time.Second + e.s.Tunables().GCDelay)
	e.gcNow()
	if got := serials(must(c.Read(SessionKeyring))(t)); len(got) != 1 || got[0] != keep {
		t.Fatalf("after expiry + gc_delay the session holds %v, want only %d", got, keep)
	}
	st := e.s.GCStats()
	if st.Pruned[ReapExpired] != 1 || st.Pruned[ReapInvalidated] != 1 {
		t.Fatalf("pruned %v", st.Pruned)
	}
}

func containsSerial(ids []Serial, id Serial) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// A key linked from several keyrings is pruned from all of them.
func TestGCPrunesEveryLink(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	var rings []Serial
	for i := range 5 {
		rings = append(rings, must(c.AddKey("keyring", fmt.Sprint("r", i), nil, SessionKeyring))(t))
	}
	id := must(c.AddKey("user", "shared", []byte("x"), rings[0]))(t)
	for _, r := range rings[1:] {
		noErr(t, c.Link(id, r))
	}
	noErr(t, c.Invalidate(id))
	e.gcNow()
	for _, r := range rings {
		if got := serials(must(c.Read(r))(t)); len(got) != 0 {
			t.Fatalf("keyring %d still holds %v", r, got)
		}
	}
	if e.s.lookup(id) != nil {
		t.Fatal("invalidated key still indexed after its links were pruned")
	}
}

// Unregistering a type kills its keys wherever they are linked and returns
// only when they are gone.
func TestGCUnregisterType(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	custom := &Type{Name: "custom", Preparse: userPreparse, Read: func(p *Payload) ([]byte, error) { return p.Data, nil }}
	noErr(t, e.s.RegisterType(custom))
	var ids []Serial
	var rings []Serial
	for i := range 4 {
		r := must(c.AddKey("keyring", fmt.Sprint("r", i), nil, SessionKeyring))(t)
		rings = append(rings, r)
		for j := range 3 {
			id := must(c.AddKey("custom", fmt.Sprint("k", i, j), []byte("x"), r))(t)
			ids = append(ids, id)
			noErr(t, c.Link(id, rings[0]))
		}
	}
	if err := e.s.UnregisterType("custom"); err != nil {
		t.Fatal(err)
	}
	e.settle()
	for _, r := range rings {
		if got := serials(must(c.Read(r))(t)); len(got) != 0 && !(r == rings[0] && allKeyrings(e, got)) {
			t.Fatalf("keyring %d still holds %v", r, got)
		}
	}
	for _, id := range ids {
		if e.s.lookup(id) != nil {
			t.Fatalf("key %d of the unregistered type still indexed", id)
		}
	}
	_, err := c.AddKey("custom", "new", []byte("x"), SessionKeyring)
	wantErr(t, "add after unregister", err, ENODEV)
	wantErr(t, "unregister twice", e.s.UnregisterType("custom"), ENOKEY)
}

func allKeyrings(e *env, ids []Serial) bool {
	for _, id := range ids {
		if k := e.s.lookup(id); k == nil || !k.isKeyring() {
			return false
		}
	}
	return true
}

// Passes requested while a pass runs are not lost, and work items never
// exceed the chunk bound, with many keys reaped under concurrent load.
func TestGCChunksAndRequestsDuringPass(t *testing.T) {
	const n = 5000
	e := newEnv(t, withChunkSize(64))
	c := e.caller(0, 0)
	ring := must(c.AddKey("keyring", "bulk", nil, SessionKeyring))(t)
	for i := range n {
		must(c.AddKey("user", fmt.Sprint("k", i), []byte("payload"), ring))(t)
	}
	before := e.s.Keys()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // keep requesting passes while the collector works
		defer wg.Done()
		for range 200 {
			e.s.RequestGC()
			time.Sleep(50 * time.Microsecond)
		}
	}()
	noErr(t, c.Clear(ring))
	wg.Wait()
	e.settle()
	if got := e.s.Keys(); got != before-n {
		t.Fatalf("%d keys indexed after reaping %d of %d", got, n, before)
	}
	st := e.s.GCStats()
	if st.MaxScannedPerItem > 64 || st.MaxDestroyedPerItem > 64 {
		t.Fatalf("a work item scanned %d and destroyed %d keys; the chunk is 64", st.MaxScannedPerItem, st.MaxDestroyedPerItem)
	}
	if st.Destroyed < n || st.Items < n/64 {
		t.Fatalf("stats %+v", st)
	}
	// A pass requested now, after everything settled, still runs.
	passes := st.Passes
	e.gcNow()
	if e.s.GCStats().Passes <= passes {
		t.Fatal("a pass requested after the others was lost")
	}
}

// Keys whose last reference goes are already out of the index, so
// destroying them costs no scan of it: a keyring of thousands cleared
// among many other keys is reaped with no pass and no key examined (each
// burial used to cost a pass over every key).
func TestGCUnusedKeysNeedNoPass(t *testing.T) {
	for _, chunk := range []int{64, 0} { // 0: unbounded items
		t.Run(fmt.Sprint("chunk=", chunk), func(t *testing.T) { testUnusedKeysNeedNoPass(t, chunk) })
	}
}

func testUnusedKeysNeedNoPass(t *testing.T, chunk int) {
	const n = 3000
	e := newEnv(t, withChunkSize(chunk))
	c := e.caller(0, 0)
	ring := must(c.AddKey("keyring", "bulk", nil, SessionKeyring))(t)
	keep := must(c.AddKey("keyring", "keep", nil, SessionKeyring))(t)
	for i := range n {
		must(c.AddKey("user", fmt.Sprint("k", i), []byte("payload"), ring))(t)
		must(c.AddKey("user", fmt.Sprint("k", i), []byte("payload"), keep))(t)
	}
	e.settle()
	before := e.s.GCStats()
	keysBefore := e.s.Keys()
	noErr(t, c.Clear(ring))
	for i := range 10 { // and one at a time
		id := must(c.Search(keep, "user", fmt.Sprint("k", i), 0))(t)
		noErr(t, c.Unlink(id, keep))
	}
	e.settle()
	st := e.s.GCStats()
	if got := st.Destroyed - before.Destroyed; got != n+10 {
		t.Fatalf("%d keys destroyed, want %d", got, n+10)
	}
	if got := e.s.Keys(); got != keysBefore-n-10 {
		t.Fatalf("%d keys indexed, want %d", got, keysBefore-n-10)
	}
	if st.Passes != before.Passes || st.Scanned != before.Scanned {
		t.Fatalf("reaping unused keys ran %d passes examining %d keys", st.Passes-before.Passes, st.Scanned-before.Scanned)
	}
}

// TestGCSweepOrDefer reaps links from two large keyrings: one where half
// the links die at once, which the collector sweeps in steps, and one
// where one link in a hundred dies, which it prunes key by key once the
// scan is over. In both, every dead link goes, every live one stays, the
// quota comes back, and no item exceeds its budget.
func TestGCSweepOrDefer(t *testing.T) {
	const n, chunk = 6000, 128
	tun := DefaultTunables()
	tun.GCDelay = 0
	e := newEnv(t, withChunkSize(chunk), WithTunables(tun))
	c := e.caller(0, 0)
	many := must(c.AddKey("keyring", "many", nil, SessionKeyring))(t)
	few := must(c.AddKey("keyring", "few", nil, SessionKeyring))(t)
	k0, b0 := e.s.QuotaUsage(0)
	var live []Serial
	for i := range n {
		for _, r := range []struct {
			ring Serial
			dies bool
		}{{many, i%2 == 0}, {few, i%100 == 0}} {
			id := must(c.AddKey("user", fmt.Sprint(r.ring, "-", i), []byte("payload"), r.ring))(t)
			// Revocation requests a pass at once; expiry waits for the
			// clock (the test's, which moves only when told), so that the
			// many deaths come to one pass.
			switch {
			case !r.dies:
				live = append(live, id)
			case r.ring == few && i%200 == 0:
				noErr(t, c.Revoke(id))
			default:
				noErr(t, c.SetTimeout(id, 1))
			}
		}
	}
	e.clock.advance(2 * time.Second)
	e.gcNow()
	for _, r := range []struct {
		ring Serial
		want int
	}{{many, n / 2}, {few, n - n/100}} {
		if got := len(must(c.Read(r.ring))(t)) / 4; got != r.want {
			t.Fatalf("keyring %d holds %d links, want %d", r.ring, got, r.want)
		}
	}
	for _, id := range live {
		if p, err := c.Read(id); err != nil || string(p) != "payload" {
			t.Fatalf("live key %d: %q, %v", id, p, err)
		}
	}
	st := e.s.GCStats()
	if st.Sweeps != 1 || st.SweptLinks < n/2 || st.SweptLinks > n {
		t.Fatalf("%d sweeps over %d links, want one of the keyring whose links half died", st.Sweeps, st.SweptLinks)
	}
	if want := uint64(n/2 + n/100); st.Pruned[ReapExpired]+st.Pruned[ReapRevoked] != want {
		t.Fatalf("pruned %v, want %d in all", st.Pruned, want)
	}
	if st.MaxWorkPerItem > chunk+1 || st.MaxScannedPerItem > chunk || st.MaxDestroyedPerItem > chunk {
		t.Fatalf("an item did %d units of work (scanned %d, destroyed %d); the chunk is %d",
			st.MaxWorkPerItem, st.MaxScannedPerItem, st.MaxDestroyedPerItem, chunk)
	}
	noErr(t, c.Clear(many))
	noErr(t, c.Clear(few))
	e.gcNow()
	if k1, b1 := e.s.QuotaUsage(0); k1 != k0 || b1 != b0 {
		t.Fatalf("quota %d/%d after reaping everything, want %d/%d", k1, b1, k0, b0)
	}
	m := &machine{rt: t, s: e.s, callers: []*Caller{c}}
	idx := m.indexed()
	m.checkLinks(idx)
	checkParents(t, idx)
}

// TestGCUnregisterTypeLargeKeyring unregisters a type whose keys fill a
// large keyring beside live keys of another type: the collector sweeps
// the keyring (most of its links died at once) and unregistration
// returns with every key of the type gone and the live ones linked.
func TestGCUnregisterTypeLargeKeyring(t *testing.T) {
	const n = 3000
	e := newEnv(t, withChunkSize(100))
	c := e.caller(0, 0)
	custom := &Type{Name: "custom", Preparse: userPreparse}
	noErr(t, e.s.RegisterType(custom))
	ring := must(c.AddKey("keyring", "big", nil, SessionKeyring))(t)
	var doomed []*Key
	for i := range n {
		id := must(c.AddKey("custom", fmt.Sprint("c", i), []byte("x"), ring))(t)
		doomed = append(doomed, e.s.lookup(id))
		if i%10 == 0 {
			must(c.AddKey("user", fmt.Sprint("u", i), []byte("live"), ring))(t)
		}
	}
	before := e.s.GCStats().Sweeps
	noErr(t, e.s.UnregisterType("custom"))
	e.settle()
	if got := len(must(c.Read(ring))(t)) / 4; got != n/10 {
		t.Fatalf("keyring holds %d links after unregistering, want the %d live ones", got, n/10)
	}
	for _, k := range doomed {
		if e.s.lookup(k.serial) == k {
			t.Fatalf("key %d of the unregistered type still indexed", k.serial)
		}
	}
	st := e.s.GCStats()
	if st.Sweeps == before {
		t.Fatal("the keyring was not swept")
	}
	if st.MaxWorkPerItem > 101 {
		t.Fatalf("an item did %d units of work; the chunk is 100", st.MaxWorkPerItem)
	}
}

// TestGCItemCPUTime: items' CPU time is measured only when asked for.
func TestGCItemCPUTime(t *testing.T) {
	for _, measured := range []bool{false, true} {
		var opts []Option
		if measured {
			opts = append(opts, withItemCPUTime())
		}
		e := newEnv(t, opts...)
		c := e.caller(0, 0)
		ring := must(c.AddKey("keyring", "r", nil, SessionKeyring))(t)
		for i := range 100 {
			must(c.AddKey("user", fmt.Sprint("k", i), []byte("x"), ring))(t)
		}
		noErr(t, c.Clear(ring))
		e.gcNow()
		st := e.s.GCStats()
		if st.Items == 0 {
			t.Fatal("no collector item ran")
		}
		if got := st.ItemCPU.Count > 0; got != (measured && runtime.GOOS == "linux") {
			t.Fatalf("ItemCPUTime %v: %d items' CPU time measured", measured, st.ItemCPU.Count)
		}
	}
}

// TestGCCloseWithSharedQueue closes services whose collector runs on a
// queue they do not own while a pass is under way and keys wait for their
// grace period: no item of the closed collector may run after Close (a
// grace-period callback used to schedule one, which then destroyed keys
// beside Close's own final sweep).
func TestGCCloseWithSharedQueue(t *testing.T) {
	dom := rcu.New(rcu.WithName("gc-close-shared"))
	defer dom.Close()
	wq := workqueue.New(dom, workqueue.WithName("gc-close-shared"), workqueue.WithWorkers(1))
	defer wq.Close()
	for round := range 30 {
		s := New(WithDomain(dom), WithGCTuning(tuning.GC{ChunkSize: 64, ChunkSizeSet: true, Queue: wq}))
		c := s.NewCaller(Cred{UID: 0, GID: 0, PID: 1})
		ring, err := c.AddKey("keyring", "r", nil, ProcessKeyring)
		if err != nil {
			t.Fatal(err)
		}
		n := 500 + 50*round
		for i := range n {
			if _, err := c.AddKey("user", fmt.Sprintf("k%d", i), []byte("x"), ring); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Clear(ring); err != nil {
			t.Fatal(err)
		}
		c.Release()
		s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = dom.Barrier(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := wq.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := s.gcol.work.Pending(); got {
			t.Fatalf("round %d: the closed collector's item is pending", round)
		}
		if round == 0 {
			// Unregistering a type once the collector is closed returns
			// rather than wait for stages no item will run.
			if err := s.UnregisterType("user"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Unregistering a type returns once its keys' links are gone, as the
// kernel's unregister_key_type waits for its collector: a keyring that
// grows afterwards (its trie positions splitting) lists only live keys,
// and nothing of the type is left.
func TestGCUnregisterTypeThenGrow(t *testing.T) {
	e := newEnv(t)
	c := e.caller(0, 0)
	custom := &Type{Name: "custom", Preparse: userPreparse}
	noErr(t, e.s.RegisterType(custom))
	ring := must(c.AddKey("keyring", "r", nil, SessionKeyring))(t)
	var doomed []*Key
	for i := range 40 {
		id := must(c.AddKey("custom", fmt.Sprint("c", i), []byte("x"), ring))(t)
		doomed = append(doomed, e.s.lookup(id))
	}
	noErr(t, e.s.UnregisterType("custom"))
	const n = 4000
	for i := range n {
		must(c.AddKey("user", fmt.Sprint("u", i), []byte("live"), ring))(t)
	}
	e.settle()
	if got := len(must(c.Read(ring))(t)) / 4; got != n {
		t.Fatalf("keyring holds %d links, want the %d live ones", got, n)
	}
	for _, k := range doomed {
		if e.s.lookup(k.serial) == k {
			t.Fatalf("key %d of the unregistered type still indexed", k.serial)
		}
	}
	noErr(t, e.s.Check())
}

// Clearing a keyring returns at once: the collector drops its links'
// references later, as the kernel drops them in an RCU callback. Until it
// does, keys still list the cleared keyring among their parents. Nothing
// that reads those reverse links may be misled: a key linked again into
// the cleared keyring is pruned from it when it expires, a key that
// another keyring links is exported in that keyring's group, and once
// the collector has run every key lists exactly its keyrings.
func TestGCClearReleasesLater(t *testing.T) {
	dom := rcu.New(rcu.WithName("gc-release"))
	defer dom.Close()
	wq := workqueue.New(dom, workqueue.WithName("gc-release"), workqueue.WithWorkers(1))
	defer wq.Close()
	e := newEnv(t, WithDomain(dom), WithGCTuning(tuning.GC{ChunkSize: 64, ChunkSizeSet: true, Queue: wq}))
	c := e.caller(0, 0)
	ring := must(c.AddKey("keyring", "cleared", nil, SessionKeyring))(t)
	other := must(c.AddKey("keyring", "other", nil, SessionKeyring))(t)
	const n = 500
	ids := make([]Serial, n)
	for i := range n {
		ids[i] = must(c.AddKey("user", fmt.Sprint("k", i), []byte("payload"), ring))(t)
	}
	noErr(t, c.Link(ids[0], other)) // linked twice: survives the clear
	// Linkable once the clear has taken away its possession.
	noErr(t, c.SetPerm(ids[1], PossAll|UserAll))
	e.settle()
	destroyed := e.s.GCStats().Destroyed

	// Hold the collector's queue.
	hold, held := make(chan struct{}), make(chan struct{})
	wq.Schedule(workqueue.NewWork("hold", func() { close(held); <-hold }))
	<-held
	var once sync.Once
	unhold := func() { once.Do(func() { close(hold) }) }
	defer unhold() // a failure must not leave the queue held
	noErr(t, c.Clear(ring))
	if got := must(ringSerials(c, ring))(t); len(got) != 0 {
		t.Fatalf("cleared keyring lists %v", got)
	}
	if e.s.gcol.releasing.Load() != n {
		t.Fatalf("%d links releasing, want %d", e.s.gcol.releasing.Load(), n)
	}
	// Linked again while its old link waits: it lists ring twice.
	noErr(t, c.Link(ids[1], ring))
	noErr(t, c.SetTimeout(ids[1], 1))
	var buf bytes.Buffer
	noErr(t, e.s.Export(&buf))
	unhold()

	// The export taken while the release waited has the doubly linked key
	// in the other keyring (read before the clock moves: the restored
	// service reaps expired keys).
	rs, err := Import(&buf, WithClock(e.clock.now))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Service().Close()
	rc, err := rs.Caller(c.State())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Release()
	rs.Done()
	if got := must(ringSerials(rc, other))(t); !slices.Equal(got, []Serial{ids[0]}) {
		t.Fatalf("restored keyring lists %v, want [%d]", got, ids[0])
	}
	if got := must(ringSerials(rc, ring))(t); !slices.Equal(got, []Serial{ids[1]}) {
		t.Fatalf("restored cleared keyring lists %v, want [%d]", got, ids[1])
	}

	e.clock.advance(2*time.Second + e.s.Tunables().GCDelay)
	e.gcNow()
	if got := must(ringSerials(c, ring))(t); len(got) != 0 {
		t.Fatalf("the expired key is still linked: %v", got)
	}
	if got := e.s.GCStats().Destroyed - destroyed; got != n-1 {
		t.Fatalf("%d keys destroyed, want %d", got, n-1)
	}
	idx := map[Serial]*Key{}
	for k := range e.s.index.all() {
		idx[k.serial] = k
	}
	checkParents(t, idx)
}

// The graveyard's blocks come back for reuse once their keys are
// destroyed, emptied, and a queue handed out in pieces gives every entry
// once, in order.
func TestGravesReuseBlocks(t *testing.T) {
	var spare [][]graveEntry
	keys := make([]*Key, 2500)
	for i := range keys {
		keys[i] = &Key{serial: Serial(i + 3), keyRec: new(keyRec)}
	}
	var yard, batch graves
	for _, k := range keys[:2000] {
		yard.push(graveEntry{k: k}, &spare)
	}
	batch.moveFrom(&yard)
	for _, k := range keys[2000:] {
		yard.push(graveEntry{k: k}, &spare)
	}
	batch.moveFrom(&yard)
	var got []*Key
	var back [][]graveEntry
	for batch.n > 0 {
		es := batch.front(300)
		for _, e := range es {
			got = append(got, e.k)
		}
		if b := batch.drop(len(es)); b != nil {
			back = append(back, b)
		}
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("%d entries handed out, not the %d pushed in order", len(got), len(keys))
	}
	if len(back) != 3 { // 1,024 + 976, then 500
		t.Fatalf("%d blocks came back, want 3", len(back))
	}
	for _, b := range back {
		if len(b) != 0 || cap(b) != graveBlock || b[:cap(b)][0].k != nil {
			t.Fatalf("a block came back with len %d, cap %d, or a key in it", len(b), cap(b))
		}
	}
	spare = back
	yard.push(graveEntry{k: keys[0]}, &spare)
	if len(spare) != 2 {
		t.Fatalf("a push took %d spare blocks, want 1", 3-len(spare))
	}
}
