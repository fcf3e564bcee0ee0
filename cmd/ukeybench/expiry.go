package main

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/jellydator/ttlcache/v3"
	"github.com/maypok86/otter/v2"
	gocache "github.com/patrickmn/go-cache"

	"github.com/ukeys/ukeys/keys"
)

// expiryParams are the parameters of the expiry scenario.
type expiryParams struct {
	Entries    int `json:"entries"`
	Foreground int `json:"foreground"`
	// Hot entries never expire; the foreground reads and writes them.
	Hot int `json:"hot"`
	// SetEvery makes one foreground operation in SetEvery a Set (0: Gets
	// only).
	SetEvery int `json:"set_every"`
	// The foreground runs from just before the expiry until the entries
	// are reaped, at least MinWindowMS and at most MaxWindowMS after the
	// expiry.
	MinWindowMS float64 `json:"min_window_ms"`
	MaxWindowMS float64 `json:"max_window_ms"`
	// Variants, if set, names the variants to run.
	Variants []string `json:"variants,omitempty"`
}

// expiryTarget is one cache under test, behind the same workload.
type expiryTarget interface {
	// fill stores entries e0…e(n-1), all expiring at deadline, and the
	// hot entries, which do not expire.
	// step reports progress and returns errOverran, which fill returns,
	// when the deadline comes too near for the fill to finish before it.
	fill(n int, deadline time.Time, hot []string, step func(int) error) error
	get(k string)
	set(k string)
	// expire is called at the deadline (the keys package runs on a clock
	// the benchmark moves; the caches run on real time and ignore it).
	expire()
	// virtual reports whether the target's clock is moved by expire, so
	// that the deadline need not wait for a real instant.
	virtual() bool
	// stored is how many expiring entries the cache holds after fill;
	// reaped how many of them it has removed so far.
	stored() int64
	reaped() int64
	close()
}

var expiryVariants = []struct {
	name string
	make func(p expiryParams) expiryTarget
}{
	{"ukeys", newUkeysTarget},
	{"go-cache", func(expiryParams) expiryTarget { return &goCacheTarget{} }},
	{"ttlcache", func(expiryParams) expiryTarget { return &ttlcacheTarget{} }},
	{"otter", func(expiryParams) expiryTarget { return &otterTarget{} }},
	{"ristretto", func(expiryParams) expiryTarget { return &ristrettoTarget{} }},
	{"golang-lru", func(expiryParams) expiryTarget { return &lruTarget{} }},
	{"baseline", func(expiryParams) expiryTarget { return &baselineTarget{} }},
}

var expiryPayload = []byte("0123456789abcdef")

// runExpiry measures Get/Set latency while N entries expire at once, for
// each cache in turn with the same foreground load.
func runExpiry(p expiryParams, prog *progress) (report, error) {
	hot := make([]string, p.Hot)
	for i := range hot {
		hot[i] = "h" + strconv.Itoa(i)
	}
	var rows []row
	for _, v := range expiryVariants {
		if len(p.Variants) > 0 && !contains(p.Variants, v.name) {
			continue
		}
		r, err := expiryOnce(p, v.name, func() expiryTarget { return v.make(p) }, hot, prog)
		if err != nil {
			return report{}, fmt.Errorf("expiry %s: %w", v.name, err)
		}
		rows = append(rows, r)
		// Each cache's memory goes before the next one fills, so that no
		// variant pays for the previous one's garbage.
		runtime.GC()
		debug.FreeOSMemory()
	}
	if len(rows) == 0 {
		return report{}, fmt.Errorf("no variant named in %q", p.Variants)
	}
	return report{Scenario: "expiry", Params: p, Results: rows}, nil
}

// errOverran says a real-time cache did not fill before its deadline.
var errOverran = errors.New("the fill did not finish before the deadline")

func expiryOnce(p expiryParams, name string, newTarget func() expiryTarget, hot []string, prog *progress) (row, error) {
	n := p.Entries
	// Real-time caches are given time to fill before their entries
	// expire: 300 ms plus 10 µs per entry at first (they fill at 1–8 µs
	// each on an idle machine). A fill that would not finish in time on a
	// loaded machine starts again in a new cache with twice the time.
	perEntry := 10 * time.Microsecond
	var t expiryTarget
	var fillStart, deadline time.Time
	attempts := 0
	for {
		attempts++
		t = newTarget()
		fillStart = time.Now()
		deadline = fillStart.Add(300*time.Millisecond + time.Duration(n)*perEntry)
		step := func(i int) error {
			prog.step(i)
			if !t.virtual() && time.Until(deadline) < 200*time.Millisecond {
				return errOverran
			}
			return nil
		}
		prog.begin(fmt.Sprintf("expiry %s fill (attempt %d)", name, attempts), n)
		err := t.fill(n, deadline, hot, step)
		prog.end()
		if err == nil && !t.virtual() && time.Until(deadline) < 100*time.Millisecond {
			err = errOverran
		}
		if errors.Is(err, errOverran) && attempts < 5 {
			t.close()
			runtime.GC()
			perEntry *= 2
			continue
		}
		if err != nil {
			t.close()
			return row{}, err
		}
		break
	}
	defer t.close()
	fillDone := time.Now()
	if t.virtual() {
		deadline = fillDone.Add(300 * time.Millisecond)
	}
	stored := t.stored()
	runtime.GC() // start from the same heap state in every variant

	h := newHist()
	var hmu sync.Mutex
	var stop atomic.Bool
	var wg sync.WaitGroup
	var lastDone, maxGap atomic.Int64
	// The foreground starts shortly before the expiry.
	time.Sleep(time.Until(deadline.Add(-200 * time.Millisecond)))
	lastDone.Store(time.Now().UnixNano())
	for g := range p.Foreground {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := newHist()
			for i := g; !stop.Load(); i++ {
				k := hot[(i*7919)%len(hot)]
				t0 := time.Now()
				if p.SetEvery > 0 && i%p.SetEvery == 0 {
					t.set(k)
				} else {
					t.get(k)
				}
				t1 := time.Now()
				record(local, t1.Sub(t0))
				prev := lastDone.Swap(t1.UnixNano())
				gap := t1.UnixNano() - prev
				for {
					m := maxGap.Load()
					if gap <= m || maxGap.CompareAndSwap(m, gap) {
						break
					}
				}
			}
			hmu.Lock()
			h.Merge(local)
			hmu.Unlock()
		}()
	}
	time.Sleep(time.Until(deadline))
	t.expire()
	minEnd := deadline.Add(time.Duration(p.MinWindowMS * 1e6))
	maxEnd := deadline.Add(time.Duration(p.MaxWindowMS * 1e6))
	reapDone := time.Duration(-1)
	prog.begin("expiry "+name+" reap", int(stored))
	for {
		now := time.Now()
		got := t.reaped()
		prog.step(int(got))
		if reapDone < 0 && got >= stored {
			reapDone = now.Sub(deadline)
		}
		if now.After(maxEnd) || (reapDone >= 0 && now.After(minEnd) && now.After(deadline.Add(reapDone+200*time.Millisecond))) {
			break
		}
		time.Sleep(20 * time.Millisecond) // GCStats takes the lock the collector records its items under
	}
	prog.end()
	stop.Store(true)
	wg.Wait()
	r := histRow("mass-expiry", name, "us", h, 1e3)
	reapMS := -1.0 // not reaped within the window
	if reapDone >= 0 {
		reapMS = ms(reapDone)
	}
	r.Extra = map[string]any{
		"stall_ms":       float64(maxGap.Load()) / 1e6,
		"reap_done_ms":   reapMS,
		"stored":         stored,
		"reaped":         t.reaped(),
		"fill_s":         fillDone.Sub(fillStart).Seconds(),
		"fill_attempts":  attempts,
		"ops_per_s":      float64(h.TotalCount()) / time.Since(deadline.Add(-200*time.Millisecond)).Seconds(),
		"deadline_wait":  !t.virtual(),
		"window_ms":      ms(time.Since(deadline)),
		"heap_alloc_mib": heapMiB(),
	}
	return r, nil
}

func heapMiB() float64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

func expiringKey(i int) string { return "e" + strconv.Itoa(i) }

// ukeysTarget: user keys in a keyring, each with a timeout, reaped by the
// chunked collector. The service runs on a clock the benchmark moves, so
// every key expires at the same instant; the collector is then asked for a
// pass, as its timer would at the earliest expiry.
type ukeysTarget struct {
	clock   *benchClock
	svc     *keys.Service
	c       *keys.Caller
	ids     map[string]keys.Serial
	before  int64
	n       int64
	payload []byte
}

func newUkeysTarget(p expiryParams) expiryTarget {
	clock := newBenchClock()
	tun := keys.DefaultTunables()
	tun.GCDelay = 0 // reap at expiry, as the caches do
	tun.RootMaxKeys = max(tun.RootMaxKeys, p.Entries+p.Hot+1000)
	tun.RootMaxBytes = max(tun.RootMaxBytes, 64*(p.Entries+p.Hot+1000))
	svc := keys.New(keys.WithTunables(tun), keys.WithClock(clock.now))
	return &ukeysTarget{clock: clock, svc: svc, c: svc.NewCaller(keys.Cred{UID: 0, GID: 0, PID: 1}),
		ids: map[string]keys.Serial{}, payload: expiryPayload}
}

func (u *ukeysTarget) fill(n int, _ time.Time, hot []string, step func(int) error) error {
	if _, err := u.c.JoinSessionKeyring(nil); err != nil {
		return err
	}
	ring, err := u.c.AddKey("keyring", "expiring", nil, keys.SessionKeyring)
	if err != nil {
		return err
	}
	hotRing, err := u.c.AddKey("keyring", "hot", nil, keys.SessionKeyring)
	if err != nil {
		return err
	}
	for _, k := range hot {
		id, err := u.c.AddKey("user", k, u.payload, hotRing)
		if err != nil {
			return err
		}
		u.ids[k] = id
	}
	for i := range n {
		id, err := u.c.AddKey("user", expiringKey(i), u.payload, ring)
		if err != nil {
			return fmt.Errorf("adding key %d: %w", i, err)
		}
		if err := u.c.SetTimeout(id, 3600); err != nil {
			return err
		}
		if i%4096 == 0 {
			if err := step(i); err != nil {
				return err
			}
		}
	}
	u.n = int64(n)
	u.before = u.svc.DestroyedKeys()
	return nil
}

func (u *ukeysTarget) get(k string) { _, _ = u.c.Read(u.ids[k]) }
func (u *ukeysTarget) set(k string) { _ = u.c.Update(u.ids[k], u.payload) }
func (u *ukeysTarget) expire() {
	u.clock.advance(3601 * time.Second)
	u.svc.RequestGC()
}
func (u *ukeysTarget) virtual() bool { return true }
func (u *ukeysTarget) stored() int64 { return u.n }
func (u *ukeysTarget) reaped() int64 { return u.svc.DestroyedKeys() - u.before }
func (u *ukeysTarget) close()        { u.c.Release(); u.svc.Close() }
func ttlUntil(deadline time.Time) time.Duration {
	return max(time.Until(deadline), time.Millisecond)
}

// goCacheTarget: patrickmn/go-cache with a janitor every five seconds
// (ristretto's cleaning period), which walks every item and deletes the
// expired ones under the cache's one lock. A shorter period starves the
// foreground even before anything expires: on the busy two-core machine
// one walk of a million items takes about a second.
type goCacheTarget struct {
	c        *gocache.Cache
	all, hot int
}

func (g *goCacheTarget) fill(n int, deadline time.Time, hot []string, step func(int) error) error {
	g.c = gocache.New(gocache.NoExpiration, 5*time.Second)
	for _, k := range hot {
		g.c.Set(k, expiryPayload, gocache.NoExpiration)
	}
	for i := range n {
		g.c.Set(expiringKey(i), expiryPayload, ttlUntil(deadline))
		if i%4096 == 0 {
			if err := step(i); err != nil {
				return err
			}
		}
	}
	g.all, g.hot = g.c.ItemCount(), len(hot)
	return nil
}
func (g *goCacheTarget) get(k string)  { _, _ = g.c.Get(k) }
func (g *goCacheTarget) set(k string)  { g.c.Set(k, expiryPayload, gocache.NoExpiration) }
func (g *goCacheTarget) expire()       {}
func (g *goCacheTarget) virtual() bool { return false }
func (g *goCacheTarget) stored() int64 { return int64(g.all - g.hot) }
func (g *goCacheTarget) reaped() int64 { return int64(g.all - g.c.ItemCount()) }
func (g *goCacheTarget) close()        { g.c.Flush() }

// ttlcacheTarget: jellydator/ttlcache v3 with its cleaner goroutine
// (Start), which deletes every expired item under the cache's lock.
type ttlcacheTarget struct {
	c       *ttlcache.Cache[string, []byte]
	stopped chan struct{}
	n       int64
	before  uint64
}

func (t *ttlcacheTarget) fill(n int, deadline time.Time, hot []string, step func(int) error) error {
	t.c = ttlcache.New[string, []byte](ttlcache.WithDisableTouchOnHit[string, []byte]())
	t.stopped = make(chan struct{})
	go func() { t.c.Start(); close(t.stopped) }()
	for _, k := range hot {
		t.c.Set(k, expiryPayload, ttlcache.NoTTL)
	}
	for i := range n {
		t.c.Set(expiringKey(i), expiryPayload, ttlUntil(deadline))
		if i%4096 == 0 {
			if err := step(i); err != nil {
				return err
			}
		}
	}
	t.n = int64(n)
	t.before = t.c.Metrics().Evictions
	return nil
}
func (t *ttlcacheTarget) get(k string)  { _ = t.c.Get(k) }
func (t *ttlcacheTarget) set(k string)  { t.c.Set(k, expiryPayload, ttlcache.NoTTL) }
func (t *ttlcacheTarget) expire()       {}
func (t *ttlcacheTarget) virtual() bool { return false }
func (t *ttlcacheTarget) stored() int64 { return t.n }
func (t *ttlcacheTarget) reaped() int64 { return int64(t.c.Metrics().Evictions - t.before) }
func (t *ttlcacheTarget) close() {
	t.c.Stop()
	<-t.stopped
	t.c.DeleteAll()
}

// otterTarget: maypok86/otter v2 with a per-entry expiry (every expiring
// entry gets the same deadline); expired entries are removed by its
// maintenance, run on writes and on its periodic clean-up goroutine.
type otterTarget struct {
	c   *otter.Cache[string, []byte]
	n   int64
	hot int
}

// otterNever is the expiry of the hot entries: longer than any run.
const otterNever = 24 * time.Hour

func (o *otterTarget) fill(n int, deadline time.Time, hot []string, step func(int) error) error {
	o.c = otter.Must(&otter.Options[string, []byte]{
		ExpiryCalculator: otter.ExpiryCreatingFunc(func(e otter.Entry[string, []byte]) time.Duration {
			if e.Key[0] == 'h' {
				return otterNever
			}
			return ttlUntil(deadline)
		}),
	})
	for _, k := range hot {
		o.c.Set(k, expiryPayload)
	}
	for i := range n {
		o.c.Set(expiringKey(i), expiryPayload)
		if i%4096 == 0 {
			if err := step(i); err != nil {
				return err
			}
		}
	}
	o.n = int64(n)
	o.hot = len(hot)
	return nil
}
func (o *otterTarget) get(k string)  { _, _ = o.c.GetIfPresent(k) }
func (o *otterTarget) set(k string)  { o.c.Set(k, expiryPayload) }
func (o *otterTarget) expire()       {}
func (o *otterTarget) virtual() bool { return false }
func (o *otterTarget) stored() int64 { return o.n }
func (o *otterTarget) reaped() int64 { return o.n - int64(max(o.c.EstimatedSize()-o.hot, 0)) }
func (o *otterTarget) close()        { o.c.StopAllGoroutines(); o.c.InvalidateAll() }

// ristrettoTarget: dgraph-io/ristretto v2 with a TTL per entry; its
// cleaner removes expired entries bucket by bucket (5 s buckets) on a
// ticker. Ristretto may drop writes under contention, so what it stored
// is counted after the fill.
type ristrettoTarget struct {
	c      *ristretto.Cache[string, []byte]
	n      int64
	evicts atomic.Int64
}

func (r *ristrettoTarget) fill(n int, deadline time.Time, hot []string, step func(int) error) error {
	c, err := ristretto.NewCache(&ristretto.Config[string, []byte]{
		NumCounters:        int64(10 * (n + len(hot))),
		MaxCost:            int64(2 * (n + len(hot))),
		BufferItems:        64,
		IgnoreInternalCost: true,
		OnEvict:            func(*ristretto.Item[[]byte]) { r.evicts.Add(1) },
	})
	if err != nil {
		return err
	}
	r.c = c
	for _, k := range hot {
		c.Set(k, expiryPayload, 1)
	}
	for i := range n {
		c.SetWithTTL(expiringKey(i), expiryPayload, 1, ttlUntil(deadline))
		if i%4096 == 0 {
			if err := step(i); err != nil {
				return err
			}
		}
	}
	c.Wait()
	for i := range n {
		if _, ok := c.Get(expiringKey(i)); ok {
			r.n++
		}
	}
	return nil
}
func (r *ristrettoTarget) get(k string)  { _, _ = r.c.Get(k) }
func (r *ristrettoTarget) set(k string)  { r.c.Set(k, expiryPayload, 1) }
func (r *ristrettoTarget) expire()       {}
func (r *ristrettoTarget) virtual() bool { return false }
func (r *ristrettoTarget) stored() int64 { return r.n }
func (r *ristrettoTarget) reaped() int64 { return r.evicts.Load() }
func (r *ristrettoTarget) close()        { r.c.Close() }

// lruTarget: hashicorp/golang-lru v2's expirable LRU. Its TTL is one for
// the whole cache, counted from each entry's insertion, so the entries
// expire over the fill's duration rather than at one instant; its cleaner
// deletes one of 100 time buckets every TTL/100.
type lruTarget struct {
	c      *expirable.LRU[string, []byte]
	n      int64
	evicts atomic.Int64
}

func (l *lruTarget) fill(n int, deadline time.Time, hot []string, step func(int) error) error {
	l.c = expirable.NewLRU[string, []byte](0, func(k string, _ []byte) {
		if k[0] == 'e' {
			l.evicts.Add(1)
		}
	}, ttlUntil(deadline))
	for _, k := range hot {
		l.c.Add(k, expiryPayload)
	}
	for i := range n {
		l.c.Add(expiringKey(i), expiryPayload)
		if i%4096 == 0 {
			if err := step(i); err != nil {
				return err
			}
		}
	}
	l.n = int64(n)
	return nil
}
func (l *lruTarget) get(k string)  { _, _ = l.c.Get(k) }
func (l *lruTarget) set(k string)  { l.c.Add(k, expiryPayload) }
func (l *lruTarget) expire()       {}
func (l *lruTarget) virtual() bool { return false }
func (l *lruTarget) stored() int64 { return l.n }
func (l *lruTarget) reaped() int64 { return l.evicts.Load() }

// close empties the cache. The expirable LRU has no way to stop its
// cleaner goroutine (its done channel is never closed); an empty cache
// keeps it cheap.
func (l *lruTarget) close() { l.c.Purge() }

// baselineTarget: the same foreground on a mutex-guarded map, with the
// same number of entries held in memory (so the garbage collector has a
// heap of the same order to mark) but nothing expiring: the machine's
// floor.
type baselineTarget struct {
	mu      sync.Mutex
	m       map[string][]byte
	ballast map[string][]byte
}

func (b *baselineTarget) fill(n int, _ time.Time, hot []string, step func(int) error) error {
	b.m = map[string][]byte{}
	for _, k := range hot {
		b.m[k] = expiryPayload
	}
	b.ballast = make(map[string][]byte, n)
	for i := range n {
		b.ballast[expiringKey(i)] = expiryPayload
		if i%4096 == 0 {
			if err := step(i); err != nil {
				return err
			}
		}
	}
	return nil
}
func (b *baselineTarget) get(k string) {
	b.mu.Lock()
	_ = b.m[k]
	b.mu.Unlock()
}
func (b *baselineTarget) set(k string) {
	b.mu.Lock()
	b.m[k] = expiryPayload
	b.mu.Unlock()
}
func (b *baselineTarget) expire()       {}
func (b *baselineTarget) virtual() bool { return true }
func (b *baselineTarget) stored() int64 { return 0 }
func (b *baselineTarget) reaped() int64 { return 0 }
func (b *baselineTarget) close()        { b.ballast = nil }
