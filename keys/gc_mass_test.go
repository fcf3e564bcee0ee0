package keys

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// TestGCMassReap has the collector reap many keys at once, expired,
// unlinked and revoked, spread over keyrings and some linked twice, while
// a goroutine moves other keys between keyrings during the passes and
// reads them: the moved keys must survive, everything dead must go, and
// afterwards the state machine's invariants hold (quota equal to the sum
// over live keys, no link to a destroyed key, no cycle, every reference
// accounted for). UKEYS_MILLION=1 runs it with a million keys.
func TestGCMassReap(t *testing.T) {
	n := 8_000
	if os.Getenv("UKEYS_MILLION") == "1" && !testing.Short() {
		n = 1_000_000
	}
	if v := os.Getenv("UKEYS_MASS"); v != "" {
		fmt.Sscan(v, &n)
	}
	tun := DefaultTunables()
	tun.GCDelay = 0
	tun.RootMaxKeys, tun.RootMaxBytes = n+1000, 64*(n+1000)
	e := newEnv(t, withChunkSize(256), WithTunables(tun))
	c := e.caller(0, 0)
	var rings [4]Serial
	for i := range rings {
		rings[i] = must(c.AddKey("keyring", fmt.Sprint("r", i), nil, SessionKeyring))(t)
	}
	var doomed []*Key // keys, not serials: a reaped key's serial may be reused
	var movers []Serial
	for i := range n {
		ring := rings[i%3]
		id := must(c.AddKey("user", fmt.Sprint("k", i), []byte("payload"), ring))(t)
		if i%8 <= 5 {
			doomed = append(doomed, e.s.lookup(id)) // before a revocation lets it go
		}
		switch i % 8 {
		case 0, 1, 2: // expires
			noErr(t, c.SetTimeout(id, 1))
		case 3: // linked twice, then expires
			noErr(t, c.Link(id, rings[3]))
			noErr(t, c.SetTimeout(id, 1))
		case 4: // unlinked (below)
		case 5: // revoked
			noErr(t, c.Revoke(id))
		case 6: // moved between keyrings during the passes
			movers = append(movers, id)
		}
	}
	for i := range n { // the unlinked ones lose their only link
		if i%8 == 4 {
			id := must(c.Search(rings[i%3], "user", fmt.Sprint("k", i), 0))(t)
			noErr(t, c.Unlink(id, rings[i%3]))
		}
	}
	e.clock.advance(2 * time.Second)

	var wg sync.WaitGroup
	stop := make(chan struct{})
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt() // before the caller is released, even on failure
	wg.Add(1)
	go func() {
		defer wg.Done()
		for round := 0; ; round++ {
			for _, id := range movers {
				select {
				case <-stop:
					return
				default:
				}
				// Link into the next keyring, then drop the old link: the
				// key always holds at least one.
				from, to := rings[(round+int(id))%3], rings[(round+int(id)+1)%3]
				if err := c.Link(id, to); err != nil {
					t.Errorf("relink %d: %v", id, err)
					return
				}
				_ = c.Unlink(id, from)
				if p, err := c.Read(id); err != nil || string(p) != "payload" {
					t.Errorf("moved key %d read %q, %v", id, p, err)
					return
				}
			}
		}
	}()
	// A million keys take longer than env.settle allows on a loaded
	// machine.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for range 3 {
		e.s.RequestGC()
		if err := e.s.WaitGC(ctx); err != nil {
			t.Fatal(err)
		}
	}
	halt()
	e.s.RequestGC()
	if err := e.s.WaitGC(ctx); err != nil {
		t.Fatal(err)
	}

	for _, k := range doomed {
		if k.usage.Load() != 0 || e.s.lookup(k.serial) == k {
			var in []Serial
			for _, r := range rings {
				rk := e.s.lookup(r)
				if l, ok := rk.loadRing().find(k.typeName(), k.description()); ok && l.key == k {
					in = append(in, r)
				}
			}
			t.Fatalf("key %d (%q) should have been reaped: usage %d, flags %#x, expiry %d (now %d), linked from %v; stats %+v",
				k.serial, k.description(), k.usage.Load(), k.flags.Load(), k.expiry.Load(), e.s.now(), in, e.s.GCStats())
		}
	}
	for _, id := range movers {
		if p, err := c.Read(id); err != nil || string(p) != "payload" {
			t.Fatalf("moved key %d: %q, %v", id, p, err)
		}
	}
	st := e.s.GCStats()
	if st.MaxScannedPerItem > 256 || st.MaxDestroyedPerItem > 256 || st.MaxWorkPerItem > 257 {
		t.Fatalf("an item scanned %d or destroyed %d keys, %d units of work; the chunk is 256",
			st.MaxScannedPerItem, st.MaxDestroyedPerItem, st.MaxWorkPerItem)
	}
	if st.Sweeps == 0 {
		t.Fatal("no keyring was swept, though most of their links died at once")
	}
	m := &machine{rt: t, s: e.s, callers: []*Caller{c}}
	idx := m.indexed()
	m.checkQuota(idx)
	m.checkLinks(idx)
	m.checkCycles(idx)
	m.checkUsage(idx)
	checkParents(t, idx)
}

// checkParents verifies the collector's reverse links: a key lists each
// keyring that links it, and only those.
func checkParents(t *testing.T, idx map[Serial]*Key) {
	t.Helper()
	want := map[*Key]map[*Key]int{}
	for _, ring := range idx {
		if snap := ring.loadRing(); snap != nil && ring.isKeyring() {
			hwalk(snap.ix, snap.root, func(l link) bool {
				if want[l.key] == nil {
					want[l.key] = map[*Key]int{}
				}
				want[l.key][ring]++
				return true
			})
		}
	}
	for _, k := range idx {
		got := map[*Key]int{}
		for _, p := range k.parentList() {
			got[p]++
		}
		if len(got) != len(want[k]) {
			t.Fatalf("key %d lists %d parents, is linked from %d keyrings", k.serial, len(got), len(want[k]))
		}
		for p, n := range want[k] {
			if got[p] != n {
				t.Fatalf("key %d: linked %d times from keyring %d, listed %d", k.serial, n, p.serial, got[p])
			}
		}
	}
}
