package keys

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/secmem"
)

// benchEnv is newEnv for benchmarks: a service on the real clock (so that
// what time.Now costs is measured too) with tunables that let root hold
// what the benchmark creates.
func benchEnv(b *testing.B, tun Tunables) *Service {
	b.Helper()
	s := New(WithTunables(tun))
	b.Cleanup(func() {
		if err := s.Close(); err != nil {
			b.Error(err)
		}
	})
	return s
}

func benchCaller(b *testing.B, s *Service, uid uint32) *Caller {
	b.Helper()
	c := s.NewCaller(Cred{UID: uid, GID: uid, PID: int(1000 + uid)})
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Release)
	return c
}

// BenchmarkLookupRead looks a key up by serial and reads its payload: the
// KEYCTL_READ path, with its possession search of the caller's keyrings.
func BenchmarkLookupRead(b *testing.B) {
	s := benchEnv(b, DefaultTunables())
	c := benchCaller(b, s, 1000)
	// A few neighbours, so that the session keyring is not trivially small.
	for i := range 8 {
		must(c.AddKey("user", fmt.Sprint("n", i), []byte("neighbour"), SessionKeyring))(b)
	}
	id := must(c.AddKey("user", "secret", []byte("0123456789abcdef"), SessionKeyring))(b)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, err := c.Read(id)
			if err != nil || len(p) != 16 {
				b.Fatal(p, err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			// One caller per goroutine, as the daemon has one per client,
			// all sharing the session keyring.
			cc := c.Fork(2000)
			defer cc.Release()
			for pb.Next() {
				p, err := cc.Read(id)
				if err != nil || len(p) != 16 {
					b.Error(p, err)
					return
				}
			}
		})
	})
	b.Run("into", func(b *testing.B) {
		// keyctl_read's shape: the caller's buffer, no allocation.
		b.ReportAllocs()
		buf := make([]byte, 64)
		for b.Loop() {
			n, err := c.ReadInto(id, buf)
			if err != nil || n != 16 {
				b.Fatal(n, err)
			}
		}
	})
	b.Run("lookup", func(b *testing.B) {
		// The serial index alone.
		b.ReportAllocs()
		for b.Loop() {
			if s.lookup(id) == nil {
				b.Fatal("lost")
			}
		}
	})
	b.Run("possesses", func(b *testing.B) {
		k := s.lookup(id)
		b.ReportAllocs()
		for b.Loop() {
			if !c.possesses(k) {
				b.Fatal("not possessed")
			}
		}
	})
}

// BenchmarkSearch10k searches a keyring of 10,000 keys by type and
// description (KEYCTL_SEARCH).
func BenchmarkSearch10k(b *testing.B) {
	tun := DefaultTunables()
	s := benchEnv(b, tun)
	c := benchCaller(b, s, 0)
	ring := must(c.AddKey("keyring", "big", nil, SessionKeyring))(b)
	for i := range 10000 {
		must(c.AddKey("user", "k"+strconv.Itoa(i), []byte("v"), ring))(b)
	}
	descs := make([]string, 1024)
	for i := range descs {
		descs[i] = "k" + strconv.Itoa(i*9)
	}
	b.Run("ring", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := c.Search(ring, "user", descs[i&1023], 0); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("session", func(b *testing.B) {
		// From the session keyring, one level down.
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := c.Search(SessionKeyring, "user", descs[i&1023], 0); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("tree", func(b *testing.B) {
		// The search itself, without the lookup of the keyring.
		k := s.lookup(ring)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			sc := search{cred: c.cr(), typ: "user", desc: descs[i&1023], stateCheck: true, checkPerm: true, recurse: true, now: s.now()}
			sec := s.dom.Read()
			_, err := sc.tree(k, true)
			sec.End()
			if err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkAddKey adds keys to a keyring (add_key), as root.
//
// growing: every key goes into one keyring, which ends up holding b.N
// keys; the heap grows by what each key costs, and on a virtual machine
// the page faults that growth takes are a large part of the time.
//
// steady: the keyring is cleared (outside the timer) every 1024 keys and
// its keys destroyed, so the heap stays the same size and the keyring
// small: the cost of the operation itself.
func BenchmarkAddKey(b *testing.B) {
	tun := DefaultTunables()
	tun.RootMaxKeys, tun.RootMaxBytes = 1<<31-1, 1<<31-1
	payload := []byte("payload!")
	b.Run("growing", func(b *testing.B) {
		s := benchEnv(b, tun)
		c := benchCaller(b, s, 0)
		ring := must(c.AddKey("keyring", "dest", nil, SessionKeyring))(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := c.AddKey("user", "k"+strconv.Itoa(i), payload, ring); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("steady", func(b *testing.B) {
		s := benchEnv(b, tun)
		c := benchCaller(b, s, 0)
		ring := must(c.AddKey("keyring", "dest", nil, SessionKeyring))(b)
		descs := make([]string, 1024)
		for i := range descs {
			descs[i] = "k" + strconv.Itoa(i)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i == len(descs) {
				b.StopTimer()
				if err := c.Clear(ring); err != nil {
					b.Fatal(err)
				}
				// The cleared keys are destroyed before the clock runs
				// again: this measures add_key, not add_key contending with
				// the collector (ukeybench gc measures that).
				if err := s.WaitGC(context.Background()); err != nil {
					b.Fatal(err)
				}
				i = 0
				b.StartTimer()
			}
			if _, err := c.AddKey("user", descs[i], payload, ring); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkMillionKeys creates 1,000,000 user keys held by root, within
// root's default quota (root_maxkeys 1,000,000, root_maxbytes 25,000,000),
// and reports the heap each key costs. It runs once per invocation and
// only when asked: -bench MillionKeys, or UKEYS_MILLION=1 in a test run
// (TestMillionKeys).
//
// It also reports what the Go collector pays for holding them, the cost
// that the kernel does not have: the heap one cycle scans (scan-MB) and
// the CPU time of one full mark of it (mark-ms), from runtime/metrics
// around a forced collection.
//
// bytes/key counts the payloads' arena (secmem) with the heap: arena-B/key
// is the part of it in the arena's slabs. locked-MB is what the process
// has locked in memory (VmLck) once the keys are made, less what it had
// before: the arena's slabs while RLIMIT_MEMLOCK allows, or, with
// UKEYS_LOCKALL=1 (as the system daemon, secmem.LockAll), everything.
func BenchmarkMillionKeys(b *testing.B) {
	lockAllForBench(b)
	for b.Loop() {
		perKey, elapsed, scanned, mark := millionKeys(b)
		b.ReportMetric(perKey, "bytes/key")
		b.ReportMetric(float64(elapsed.Nanoseconds()), "ns/add")
		b.ReportMetric(scanned/1e6, "scan-MB")
		b.ReportMetric(mark.Seconds()*1e3, "mark-ms")
		b.ReportMetric(lastArenaPerKey, "arena-B/key")
		b.ReportMetric(lastLocked/1e6, "locked-MB")
	}
}

// lockAllForBench locks the process as the system daemon does, if
// UKEYS_LOCKALL=1.
func lockAllForBench(tb testing.TB) {
	if os.Getenv("UKEYS_LOCKALL") == "1" && !secmem.LockedAll() {
		if err := secmem.LockAll(); err != nil {
			tb.Fatalf("UKEYS_LOCKALL=1: %v", err)
		}
	}
}

// lastArenaPerKey and lastLocked are millionKeys' arena bytes a key and
// bytes newly locked.
var lastArenaPerKey, lastLocked float64

// vmLocked is the process's locked memory (VmLck), 0 where unknown.
func vmLocked() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmLck:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb * 1024
		}
	}
	return 0
}

// markCost forces collections and returns the bytes of heap one scanned
// and the CPU time its mark phase took (dedicated, fractional, idle and
// assist workers together), for the cheapest of five: on a shared
// machine a cycle's CPU time is the work plus whatever else took the
// processor meanwhile, and the least of a few is the nearest to the work.
func markCost() (scanned float64, mark time.Duration) {
	names := []string{"/gc/scan/heap:bytes", "/cpu/classes/gc/mark/assist:cpu-seconds",
		"/cpu/classes/gc/mark/dedicated:cpu-seconds", "/cpu/classes/gc/mark/idle:cpu-seconds"}
	read := func() []metrics.Sample {
		s := make([]metrics.Sample, len(names))
		for i, n := range names {
			s[i].Name = n
		}
		metrics.Read(s)
		return s
	}
	runtime.GC()
	for range 5 {
		before := read()
		runtime.GC()
		after := read()
		cpu := 0.0
		for i := 1; i < len(names); i++ {
			cpu += after[i].Value.Float64() - before[i].Value.Float64()
		}
		if d := time.Duration(cpu * float64(time.Second)); mark == 0 || d < mark {
			scanned, mark = float64(after[0].Value.Uint64()), d
		}
	}
	return scanned, mark
}

func TestMillionKeys(t *testing.T) {
	if testing.Short() || os.Getenv("UKEYS_MILLION") != "1" {
		t.Skip("set UKEYS_MILLION=1 (without -short) to create a million keys")
	}
	lockAllForBench(t)
	perKey, elapsed, scanned, mark := millionKeys(t)
	t.Logf("%.1f bytes/key (%.1f of them in the arena), %v per add_key; one collection scans %.0f MB, its mark %v of CPU; %.1f MB newly locked",
		perKey, lastArenaPerKey, elapsed, scanned/1e6, mark, lastLocked/1e6)
}

func millionKeys(tb testing.TB) (bytesPerKey float64, elapsed time.Duration, scanned float64, mark time.Duration) {
	const n = 1_000_000
	s := New()
	defer s.Close()
	// The holder is not charged to root (like the kernel's own keyrings),
	// so the million keys use root_maxkeys exactly; the caller has no
	// session keyring for the same reason.
	ring, err := s.newKeyring("million", 0, 0, PossAll|UserAll, false, false, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer ring.put()
	c := s.NewCaller(Cred{UID: 0, GID: 0})
	defer c.Release()
	payload := []byte("12345678")
	const descLen = len("k0000000")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	arenaBefore, lockedBefore := secmem.Stats().Mapped, vmLocked()
	start := time.Now()
	buf := []byte("k0000000")
	for i := range n {
		// Each key's description is its own string, as one that arrives
		// over the wire would be, and is counted with the key.
		for j, v := len(buf)-1, i; j > 0; j, v = j-1, v/10 {
			buf[j] = byte('0' + v%10)
		}
		if _, err := c.AddKey("user", string(buf), payload, ring.serial); err != nil {
			tb.Fatalf("key %d: %v", i, err)
		}
	}
	elapsed = time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := s.Keys(); got != n+1 {
		tb.Fatalf("%d keys in the index, want %d", got, n+1)
	}
	if k, by := s.QuotaUsage(0); k != n || by != n*(descLen+1+len(payload)) {
		tb.Fatalf("root quota %d keys, %d bytes", k, by)
	}
	arena := float64(secmem.Stats().Mapped - arenaBefore)
	lastArenaPerKey, lastLocked = arena/n, vmLocked()-lockedBefore
	scanned, mark = markCost() // while the keys live
	return (float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) + arena) / n, elapsed / n, scanned, mark
}
