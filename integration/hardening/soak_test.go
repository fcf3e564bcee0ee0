package hardening

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/latency"
	"github.com/ukeys/ukeys/keys"
)

var (
	soakFor     = flag.Duration("hardening.soak", 0, "run TestSoak for this long (default: a short run of a few seconds)")
	soakClients = flag.Int("hardening.soak-clients", 0, "clients in TestSoak (default 16, or 64 for a long run)")
)

// soakStats is what the clients of a soak did and waited.
type soakStats struct {
	mu      sync.Mutex
	ops     map[string]*hdrhistogram.Histogram
	total   atomic.Int64
	wrong   []string
	longest time.Duration
	slowest string
}

func (s *soakStats) observe(op string, d time.Duration) {
	s.total.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.ops[op]
	if h == nil {
		h = hdrhistogram.New(1, int64(time.Minute), 3)
		s.ops[op] = h
	}
	h.RecordValue(int64(d))
	if d > s.longest {
		s.longest, s.slowest = d, op
	}
}

func (s *soakStats) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.wrong) < 20 {
		s.wrong = append(s.wrong, fmt.Sprintf(format, args...))
	}
}

// TestSoak holds many clients adding, reading, searching, updating,
// revoking, invalidating, expiring and unlinking keys over the socket
// while the collector reaps. Every successful read must return what was
// last written; afterwards the keys invariants hold, every key the load
// made is gone, and the heap returns to its size before the load. It
// reports the operations, clients, duration and the longest wait.
func TestSoak(t *testing.T) {
	dur, clients := 3*time.Second, 16
	if *soakFor > 0 {
		dur, clients = *soakFor, 64
	}
	if *soakClients > 0 {
		clients = *soakClients
	}
	tun := keys.DefaultTunables()
	tun.GCDelay = time.Second // revoked and expired keys are pruned a second later
	d := startDaemon(t, daemonConfig{tunables: &tun, maxConns: 4 * clients})
	root := d.dial(t)
	if _, err := root.GetKeyringID(keys.UserKeyring, true); err != nil {
		t.Fatal(err)
	}
	root.Close() // quiet, below, waits for every connection but its probe
	d.settle(t)
	keysBefore := d.svc.Keys()
	heapBefore := settledHeap()

	st := &soakStats{ops: map[string]*hdrhistogram.Histogram{}}
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			soakClient(t, d, i, deadline, st)
		}()
	}
	wg.Wait()
	d.quiet(t)

	for _, w := range st.wrong {
		t.Error(w)
	}
	if got := d.svc.Keys(); got != keysBefore {
		t.Errorf("%d keys after the load, %d before", got, keysBefore)
	}
	heapAfter := settledHeap()
	// The heap returns to its size before the load, within what the
	// runtime, the collector's histograms and buffers may keep: a leak of
	// the load's keys (hundreds of thousands of them) would be far more.
	const slack = 16 << 20
	if heapAfter > heapBefore+slack {
		t.Errorf("heap %d MiB after the load, %d MiB before", heapAfter>>20, heapBefore>>20)
	}
	var names []string
	for n := range st.ops {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("soak: %d operations by %d clients in %v (%.0f/s); longest wait %v (%s); heap %d KiB before, %d KiB after",
		st.total.Load(), clients, dur, float64(st.total.Load())/dur.Seconds(), st.longest, st.slowest, heapBefore>>10, heapAfter>>10)
	for _, n := range names {
		s := latency.Of(st.ops[n])
		t.Logf("  %-10s %7d ops  p50 %8v  p99 %8v  max %8v", n, s.Count, s.P50, s.P99, s.Max)
	}
	gc := d.svc.GCStats()
	t.Logf("collector: %+v", gc)
}

// settledHeap is the live heap after the collector and the Go garbage
// collector have run, the smallest of a few readings.
func settledHeap() uint64 {
	best := ^uint64(0)
	for range 5 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		best = min(best, ms.HeapAlloc)
		time.Sleep(20 * time.Millisecond)
	}
	return best
}

// soakClient is one client's loop: a keyring of its own under the user
// keyring, 32 key slots in it, random operations on them until deadline,
// then everything unlinked.
func soakClient(t *testing.T, d *daemon, i int, deadline time.Time, st *soakStats) {
	cl, err := client.Dial(d.path)
	if err != nil {
		st.fail("client %d: dial: %v", i, err)
		return
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(uint64(i), 42))
	timed := func(op string, f func() error) error {
		start := time.Now()
		err := f()
		st.observe(op, time.Since(start))
		return err
	}
	var ring keys.Serial
	if err := timed("add", func() (err error) {
		ring, err = cl.AddKey("keyring", fmt.Sprintf("soak-%d", i), nil, keys.UserKeyring)
		return err
	}); err != nil {
		st.fail("client %d: keyring: %v", i, err)
		return
	}
	type slot struct {
		id      keys.Serial
		typ     string
		payload string
		// killed: this client revoked, expired, invalidated or unlinked
		// the key. Once the collector prunes its link, the client no
		// longer possesses it, and a read is refused (EACCES) before the
		// key's state is looked at, as in the kernel's keyctl_read.
		killed bool
	}
	var slots [32]slot
	// gone reports errors a key may legitimately give once revoked,
	// invalidated, expired or unlinked by this client (killed): an
	// unlinked key is still found by serial until the collector drops
	// it, as in the kernel, but no longer possessed, and so refused
	// (EACCES) whatever the call.
	gone := func(err error, killed bool) bool {
		return errors.Is(err, keys.ENOKEY) || errors.Is(err, keys.EKEYREVOKED) || errors.Is(err, keys.EKEYEXPIRED) ||
			killed && errors.Is(err, keys.EACCES)
	}
	for n := 0; time.Now().Before(deadline); n++ {
		k := rng.IntN(len(slots))
		s := &slots[k]
		dead := s.killed // before this operation
		desc := fmt.Sprintf("k%d", k)
		switch r := rng.IntN(100); {
		case r < 30 || s.id == 0:
			payload := fmt.Sprintf("c%d-n%d-%x", i, n, rng.Uint64())
			typ := "user"
			if r%10 == 0 {
				typ = "big_key"
			}
			var id keys.Serial
			err := timed("add", func() (err error) { id, err = cl.AddKey(typ, desc, []byte(payload), ring); return err })
			if err != nil {
				st.fail("client %d: add: %v", i, err)
				continue
			}
			s.id, s.typ, s.payload, s.killed = id, typ, payload, false
		case r < 60:
			var b []byte
			err := timed("read", func() (err error) { b, err = cl.Read(s.id); return err })
			if err == nil && string(b) != s.payload {
				st.fail("client %d: key %d read %q, last written %q", i, s.id, b, s.payload)
			} else if err != nil && !gone(err, dead) {
				st.fail("client %d: read of key %d: %v", i, s.id, err)
			}
		case r < 75:
			var id keys.Serial
			err := timed("search", func() (err error) { id, err = cl.Search(ring, s.typ, desc, 0); return err })
			if err != nil && !gone(err, dead) {
				st.fail("client %d: search: %v", i, err)
			} else if err == nil && id != s.id {
				st.fail("client %d: search %s %s found %d, slot holds %d", i, s.typ, desc, id, s.id)
			}
		case r < 80:
			err := timed("update", func() error { return cl.Update(s.id, []byte(s.payload+"+")) })
			if err == nil {
				s.payload += "+"
			} else if !gone(err, dead) {
				st.fail("client %d: update: %v", i, err)
			}
		case r < 86:
			s.killed = true
			if err := timed("revoke", func() error { return cl.Revoke(s.id) }); err != nil && !gone(err, dead) {
				st.fail("client %d: revoke: %v", i, err)
			}
		case r < 92:
			s.killed = true
			if err := timed("timeout", func() error { return cl.SetTimeout(s.id, 1) }); err != nil && !gone(err, dead) {
				st.fail("client %d: timeout: %v", i, err)
			}
		case r < 96:
			s.killed = true
			if err := timed("invalidate", func() error { return cl.Invalidate(s.id) }); err != nil && !gone(err, dead) {
				st.fail("client %d: invalidate: %v", i, err)
			}
		default:
			// A key this client already killed may have lost its link to
			// an earlier unlink or to the collector's pruning: the
			// kernel's unlink then fails with ENOENT.
			wasKilled := s.killed
			s.killed = true
			if err := timed("unlink", func() error { return cl.Unlink(s.id, ring) }); err != nil && !gone(err, dead) &&
				!(wasKilled && errors.Is(err, keys.ENOENT)) {
				st.fail("client %d: unlink: %v", i, err)
			}
		}
	}
	if err := cl.Clear(ring); err != nil {
		st.fail("client %d: clear: %v", i, err)
	}
	if err := cl.Unlink(ring, keys.UserKeyring); err != nil {
		st.fail("client %d: unlink its keyring: %v", i, err)
	}
}
