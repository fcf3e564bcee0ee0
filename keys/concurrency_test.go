package keys

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Payloads in the concurrency test are one byte repeated, and the byte
// says which description it was written for and how long it must be: a
// read that mixes two versions, or sees a wiped (zeroed) payload, or one
// written for another key, breaks the pattern.
const concDescs = 6

func concPayload(desc int, version int) []byte {
	b := byte(desc*16 + 1 + version%16)
	return bytes.Repeat([]byte{b}, concLen(b))
}

func concLen(b byte) int { return 8 + int(b)%29 }

// concCheck reports what is wrong with a payload read for desc, if
// anything.
func concCheck(desc int, p []byte) error {
	if len(p) == 0 {
		return errors.New("empty payload")
	}
	b := p[0]
	if b == 0 {
		return fmt.Errorf("wiped payload %x", p)
	}
	if int(b-1)/16 != desc {
		return fmt.Errorf("payload of byte %#x belongs to description %d", b, int(b-1)/16)
	}
	if len(p) != concLen(b) {
		return fmt.Errorf("payload of byte %#x is %d bytes, written %d", b, len(p), concLen(b))
	}
	if i := slices.IndexFunc(p, func(x byte) bool { return x != b }); i >= 0 {
		return fmt.Errorf("torn payload: byte %d is %#x in a payload of %#x", i, p[i], b)
	}
	return nil
}

// TestConcurrentReadersAndWriters runs readers that search for and read
// keys while writers update, replace, link, unlink, revoke, invalidate and
// expire them. Readers must only ever see a payload written for the key
// they asked about, intact, and only the errors those operations explain.
func TestConcurrentReadersAndWriters(t *testing.T) {
	e := newEnv(t)
	owner := e.caller(1000, 1000)
	pool := must(owner.AddKey("keyring", "pool", nil, SessionKeyring))(t)
	aux := must(owner.AddKey("keyring", "aux", nil, SessionKeyring))(t)
	tun := e.s.Tunables()
	tun.MaxKeys, tun.MaxBytes = 100000, 10000000
	if err := e.s.SetTunables(tun); err != nil {
		t.Fatal(err)
	}
	desc := func(i int) string { return fmt.Sprint("k", i) }
	for i := range concDescs {
		must(owner.AddKey("user", desc(i), concPayload(i, 0), pool))(t)
	}

	const (
		writers    = 5
		readers    = 4
		writerOps  = 1500
		readerSpin = 20 * time.Millisecond // at least, after the writers end
	)
	var (
		wg        sync.WaitGroup
		stop      atomic.Bool
		reads     atomic.Int64
		goodReads atomic.Int64
		errsMu    sync.Mutex
		errs      []string
	)
	fail := func(format string, args ...any) {
		errsMu.Lock()
		if len(errs) < 20 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
		errsMu.Unlock()
	}
	allowed := func(op string, err error, ok ...Errno) {
		if err == nil {
			return
		}
		var en Errno
		if !errors.As(err, &en) || !slices.Contains(ok, en) {
			fail("%s: unexpected error %v", op, err)
		}
	}
	// serialOf finds the key of description i currently in pool.
	serialOf := func(c *Caller, i int) (Serial, error) {
		return c.Search(pool, "user", desc(i), 0)
	}
	searchErrs := []Errno{ENOKEY, EKEYREVOKED, EKEYEXPIRED}
	// Errors of an operation on a key found by a search a moment ago: it
	// may have been revoked, invalidated, expired or destroyed since, or
	// unlinked from pool, so that the caller no longer possesses it and
	// has only the owner's view right (EACCES).
	keyErrs := []Errno{ENOKEY, EKEYREVOKED, EKEYEXPIRED, EACCES}

	writer := func(w int) {
		defer wg.Done()
		c := owner.Fork(100 + w)
		defer c.Release()
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		for n := range writerOps {
			i := rng.IntN(concDescs)
			version := n*writers + w
			switch op := rng.IntN(10); op {
			case 0, 1, 2: // add_key: update in place, or replace a dead key
				_, err := c.AddKey("user", desc(i), concPayload(i, version), pool)
				allowed("AddKey", err, EKEYREVOKED)
			case 3: // keyctl update
				id, err := serialOf(c, i)
				allowed("search for update", err, searchErrs...)
				if err == nil {
					allowed("Update", c.Update(id, concPayload(i, version)), keyErrs...)
				}
			case 4: // revoke
				id, err := serialOf(c, i)
				allowed("search for revoke", err, searchErrs...)
				if err == nil {
					allowed("Revoke", c.Revoke(id), keyErrs...)
				}
			case 5: // invalidate
				id, err := serialOf(c, i)
				allowed("search for invalidate", err, searchErrs...)
				if err == nil {
					allowed("Invalidate", c.Invalidate(id), keyErrs...)
				}
			case 6: // expire, by a timeout and the clock moving on
				id, err := serialOf(c, i)
				allowed("search for timeout", err, searchErrs...)
				if err == nil {
					allowed("SetTimeout", c.SetTimeout(id, 1), keyErrs...)
					e.clock.advance(2 * time.Second)
				}
			case 7: // link into aux and back out
				id, err := serialOf(c, i)
				allowed("search for link", err, searchErrs...)
				if err == nil {
					allowed("Link", c.Link(id, aux), keyErrs...)
					allowed("Unlink aux", c.Unlink(id, aux), ENOKEY, ENOENT)
				}
			case 8: // unlink from pool; add_key brings the description back
				id, err := serialOf(c, i)
				allowed("search for unlink", err, searchErrs...)
				if err == nil {
					allowed("Unlink", c.Unlink(id, pool), ENOKEY, ENOENT)
				}
			case 9: // clear aux
				allowed("Clear", c.Clear(aux), EKEYREVOKED)
			}
		}
	}
	reader := func(r int) {
		defer wg.Done()
		c := owner.Fork(200 + r)
		defer c.Release()
		rng := rand.New(rand.NewPCG(uint64(r), 11))
		for !stop.Load() {
			i := rng.IntN(concDescs)
			id, err := serialOf(c, i)
			reads.Add(1)
			if err != nil {
				allowed("Search", err, searchErrs...)
				continue
			}
			p, err := c.Read(id)
			if err != nil {
				// Unlinked meanwhile: not possessed any more (EACCES) or
				// gone (ENOKEY); or revoked, invalidated, expired.
				allowed("Read", err, ENOKEY, EACCES, EKEYREVOKED, EKEYEXPIRED)
				continue
			}
			if err := concCheck(i, p); err != nil {
				fail("Read(%d) for %s: %v", id, desc(i), err)
			}
			goodReads.Add(1)
			if rng.IntN(8) == 0 {
				l, err := c.Read(pool)
				allowed("Read pool", err, EKEYREVOKED)
				if len(l)%4 != 0 {
					fail("keyring listing of %d bytes", len(l))
				}
			}
		}
	}
	wg.Add(readers)
	for r := range readers {
		go reader(r)
	}
	var wwg sync.WaitGroup
	wwg.Add(writers)
	wg.Add(writers)
	for w := range writers {
		go func() { defer wwg.Done(); writer(w) }()
	}
	wwg.Wait()
	time.Sleep(readerSpin)
	stop.Store(true)
	wg.Wait()
	settleAll(e)
	for _, s := range errs {
		t.Error(s)
	}
	if goodReads.Load() == 0 {
		t.Errorf("no reader ever read a payload (%d attempts)", reads.Load())
	}
	t.Logf("%d searches, %d payloads read and checked", reads.Load(), goodReads.Load())
	// Everything the writers dropped is destroyed and its quota returned.
	if err := owner.Clear(pool); err != nil {
		t.Fatal(err)
	}
	if err := owner.Clear(aux); err != nil {
		t.Fatal(err)
	}
	settleAll(e)
	live := 0
	for k := range e.s.index.all() {
		if k.typeName() == "user" {
			live++
		}
	}
	if live != 0 {
		t.Errorf("%d user keys still live after clearing every keyring", live)
	}
}

// TestSerialIndexConcurrent hammers the serial index: inserters and
// removers race with readers that look up keys they know to be indexed,
// across table rebuilds; a lookup must find exactly that key.
func TestSerialIndexConcurrent(t *testing.T) {
	var x serialIndex
	defer x.close()
	const (
		workers = 4
		rounds  = 3000
	)
	var wg sync.WaitGroup
	var bad atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			var mine []*Key
			for n := range rounds {
				switch {
				case len(mine) < 50 || rng.IntN(3) > 0:
					k := &Key{keyRec: new(keyRec)}
					// Serials from a narrow range, so that collisions walk
					// upward across shards.
					x.insert(k, Serial(3+rng.IntN(4*rounds)))
					mine = append(mine, k)
				default:
					i := rng.IntN(len(mine))
					if !x.remove(mine[i]) {
						bad.Add(1)
					}
					if x.load(mine[i].serial) == mine[i] {
						bad.Add(1)
					}
					mine = slices.Delete(mine, i, i+1)
				}
				for _, k := range mine[max(0, len(mine)-4):] {
					if x.load(k.serial) != k {
						bad.Add(1)
					}
				}
				if n%500 == 0 {
					seen := 0
					for range x.all() {
						seen++
					}
					if seen < len(mine) {
						bad.Add(1)
					}
				}
			}
			for _, k := range mine {
				if !x.remove(k) {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d wrong answers from the serial index", n)
	}
	n := 0
	for range x.all() {
		n++
	}
	if n != 0 {
		t.Fatalf("%d keys left in an index emptied by its writers", n)
	}
	waitShrinker(t, &x)
	for i := range x.shards {
		if tab := x.shards[i].tab.Load(); tab != nil && len(tab.slots) > indexMinSlots {
			t.Fatalf("shard %d kept %d slots after emptying", i, len(tab.slots))
		}
	}
}

// TestCoarseClock checks the service's own clock: it never goes back,
// keeps within a few ticks of real time, stops ticking when unread and is
// stopped by Close (goleak in TestMain would see a leaked ticker).
func TestCoarseClock(t *testing.T) {
	s := New()
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for range 20000 {
				now := s.now()
				if now < last {
					bad.Add(1)
				}
				last = now
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatal("coarse clock went backwards")
	}
	if d := time.Duration(time.Now().UnixNano() - s.now()); d < -time.Millisecond {
		t.Fatalf("coarse clock is %v ahead of real time", -d)
	}
	// Unread, the ticker stops by itself; reading starts it again.
	deadline := time.Now().Add(2 * time.Second)
	for s.coarse.running.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if s.coarse.running.Load() {
		t.Fatal("idle coarse clock still ticking")
	}
	// Read again, it moves again (a liveness check: no bound on how fast).
	before := s.now()
	deadline = time.Now().Add(10 * time.Second)
	for s.now() == before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if s.now() == before {
		t.Fatal("restarted clock does not advance")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.coarse.running.Load() {
		t.Fatal("coarse clock ticking after Close")
	}
	if now := s.now(); now <= before {
		t.Fatal("clock after Close went backwards")
	}
}

// TestCloseWhileDestroying closes the service while other goroutines drop
// the last references to keys: a destruction that saw the service open
// must finish queueing its callback before the domain closes (a Call on a
// closed domain panics), and later ones destroy at once.
func TestCloseWhileDestroying(t *testing.T) {
	for round := range 20 {
		s := New(WithClock(func() time.Time { return time.Unix(1_700_000_000, 0) }))
		var rings []*Key
		for range 4 {
			ring, err := s.newKeyring("r", 0, 0, PossAll|UserAll, false, false, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 200 {
				k, err := s.alloc(keySpec{typ: userType, desc: fmt.Sprint("k", i), perm: PossAll})
				if err != nil {
					t.Fatal(err)
				}
				s.markInstantiated(k)
				if err := s.linkInto(ring, k, false); err != nil {
					t.Fatal(err)
				}
			}
			rings = append(rings, ring)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, ring := range rings {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ring.put() // destroys the keyring, then its 200 keys
			}()
		}
		close(start)
		if round%2 == 0 {
			time.Sleep(time.Duration(round) * 10 * time.Microsecond)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
}

// add_key of one description by several processes of one session at
// once: the kernel holds the keyring's lock from its search for a key to
// update to the link of a new one, so the first makes the key and the
// others update it. Each adder gets that key's serial and can read it;
// none is left with a key displaced by another's, which the collector
// then reaps (ENOKEY at its next read: ukeybench's syscall scenario met
// that with two callers).
func TestConcurrentAddKeyUpdatesOne(t *testing.T) {
	s := New()
	defer s.Close()
	first := s.NewCaller(Cred{UID: 0, GID: 0, PID: 10})
	defer first.Release()
	if _, err := first.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	const adders = 8
	for round := range 50 {
		desc := fmt.Sprintf("bench%d", round)
		ids := make([]Serial, adders)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range adders {
			c := first.Fork(100 + i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Release()
				<-start
				id, err := c.AddKey("user", desc, []byte(fmt.Sprintf("from %d", i)), SessionKeyring)
				if err != nil {
					t.Error(err)
					return
				}
				ids[i] = id
				if _, err := c.Read(id); err != nil {
					t.Errorf("adder %d reading the key it added, %d: %v", i, id, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		for i, id := range ids {
			if id != ids[0] {
				t.Fatalf("round %d: adder %d got key %d, adder 0 key %d: two keys of one description", round, i, id, ids[0])
			}
		}
	}
	s.WaitGC(t.Context())
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}
