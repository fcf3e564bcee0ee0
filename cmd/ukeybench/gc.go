package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/trace"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ukeys/ukeys/internal/tuning"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/rcu"
	"github.com/ukeys/ukeys/workqueue"
)

// gcParams are the parameters of the gc scenario.
type gcParams struct {
	Keys  int `json:"keys"`
	Chunk int `json:"chunk"`
	// Chunks, if set, replaces the three variants by a sweep: the
	// chunked variant once per chunk size (variant chunked-N), then the
	// baseline, for the trade-off of a work item's budget against the
	// foreground's worst operation, the probe's wait and the reap time.
	Chunks     []int `json:"chunks,omitempty"`
	Foreground int   `json:"foreground"`
	// Cases, if set, runs only these of gcCases; the pooled combined rows
	// come only with both unused and expired.
	Cases []string `json:"cases,omitempty"`
	// ItemCPU measures work items' CPU time (tuning.GC.ItemCPUTime).
	ItemCPU bool `json:"item_cpu"`
	// TraceDir, if set, receives a runtime trace of each measuring window
	// (CASE-VARIANT.trace), for finding where a stall came from.
	TraceDir string `json:"trace_dir,omitempty"`
}

// runGC reproduces keygcbench: N keys become garbage (unused: their
// keyring is cleared; expired: their timeout passes) while foreground
// goroutines add, read and search other keys and record each operation's
// latency. Each case runs chunked, unchunked, and a baseline with the
// same foreground load and the same keys held, none of them garbage: the
// floor of a process holding that many keys, whose Go heap the runtime's
// garbage collector must mark as often as the other variants'.
//
// keygcbench's third line, combined, is not a third run: its figures are
// the unused and expired runs' samples taken together (its minimum is the
// smaller minimum, its maximum the larger maximum, its mean and variance
// those of the pooled samples, in the patch's own figures). The combined
// rows here are made the same way. The mixed case is a harder one of
// ukeybench's own: half the keys are unlinked one keyctl_unlink at a
// time, while foreground and collector run, and the other half expire
// once that is done.
func runGC(p gcParams, progress func(string)) ([]row, error) {
	// The variants in the order they run, each with its chunk size: the
	// three, or with -chunks the chunked one per size. The baseline comes
	// last and measures as long as the slowest chunked reap took.
	type run struct {
		variant string
		chunk   int
		chunked bool
	}
	plan := []run{{"chunked", p.Chunk, true}, {"unchunked", 0, false}}
	if len(p.Chunks) > 0 {
		plan = plan[:0]
		for _, c := range p.Chunks {
			plan = append(plan, run{fmt.Sprintf("chunked-%d", c), c, true})
		}
	}
	plan = append(plan, run{"baseline", p.Chunk, false})
	want := func(cs string) bool { return len(p.Cases) == 0 || slices.Contains(p.Cases, cs) }
	var rows []row
	for _, cs := range gcCases {
		if !want(cs) {
			continue
		}
		var longest time.Duration
		for _, v := range plan {
			progress(fmt.Sprintf("gc %s/%s: %d keys", cs, v.variant, p.Keys))
			r, reap, err := gcOnce(p, cs, v.variant, v.chunk, longest)
			if err != nil {
				return nil, err
			}
			if v.chunked {
				longest = max(longest, reap)
			}
			rows = append(rows, r)
		}
		if cs == "expired" && want("unused") {
			rows = append(rows, pooled(rows, len(plan))...)
		}
	}
	return rows, nil
}

// gcCases are the cases runGC runs, in order; keygcbench's combined is
// made from the first two.
var gcCases = []string{"unused", "expired", "mixed"}

// pooled makes keygcbench's combined rows from the unused and expired
// ones (the first 2*perCase rows, in the same variant order): each
// variant's latency samples taken together, and of each extra the worse
// of the two (the longer wait, item or reap), the items and the faults
// summed.
func pooled(rows []row, perCase int) []row {
	out := make([]row, 0, perCase)
	for i := range perCase {
		u, e := rows[i], rows[perCase+i]
		h := hdrhistogram.Import(u.hist.Export()) // unused's range and precision
		h.Merge(e.hist)
		r := histRow("combined", u.Variant, u.Unit, h, u.div)
		r.Extra = map[string]any{}
		for k, uv := range u.Extra {
			a, okA := uv.(float64)
			b, okB := e.Extra[k].(float64)
			if !okA || !okB {
				continue
			}
			if k == "items" || k == "minor_faults" {
				r.Extra[k] = a + b
			} else {
				r.Extra[k] = max(a, b)
			}
		}
		out = append(out, r)
	}
	return out
}

// minorFaults is how many minor page faults the process has taken.
func minorFaults() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return int64(ru.Minflt)
}

func gcOnce(p gcParams, cs, variant string, chunk int, baselineFor time.Duration) (row, time.Duration, error) {
	clock := newBenchClock()
	tun := keys.DefaultTunables()
	tun.GCDelay = 0
	// Root's default quota (1,000,000 keys, 25,000,000 bytes) is the
	// kernel's; leave room for the foreground's keys beside the garbage.
	tun.RootMaxKeys = max(tun.RootMaxKeys, p.Keys+10_000)
	tun.RootMaxBytes = max(tun.RootMaxBytes, 64*(p.Keys+10_000))
	// The collector runs on a one-worker queue shared with a probe: another
	// work item, scheduled every millisecond, whose wait for the worker is
	// what the kernel calls a workqueue lockup when it grows long.
	dom := rcu.New(rcu.WithName("ukeybench-gc"))
	defer dom.Close()
	wq := workqueue.New(dom, workqueue.WithName("keys-gc"), workqueue.WithWorkers(1))
	defer wq.Close()
	opts := []keys.Option{keys.WithTunables(tun), keys.WithClock(clock.now), keys.WithDomain(dom),
		keys.WithGCTuning(tuning.GC{ChunkSize: chunk, ChunkSizeSet: true, Queue: wq, ItemCPUTime: p.ItemCPU})}
	s := keys.New(opts...)
	defer s.Close()
	root := s.NewCaller(keys.Cred{UID: 0, GID: 0, PID: 1})
	defer root.Release()
	if _, err := root.JoinSessionKeyring(nil); err != nil {
		return row{}, 0, err
	}
	garbage, err := root.AddKey("keyring", "garbage", nil, keys.SessionKeyring)
	if err != nil {
		return row{}, 0, err
	}
	work, err := root.AddKey("keyring", "work", nil, keys.SessionKeyring)
	if err != nil {
		return row{}, 0, err
	}
	n := p.Keys
	payload := []byte("0123456789abcdef")
	var unlink []keys.Serial // mixed: the half that is unlinked
	for i := range n {
		id, err := root.AddKey("user", fmt.Sprintf("g%d", i), payload, garbage)
		if err != nil {
			return row{}, 0, fmt.Errorf("adding key %d: %w", i, err)
		}
		if cs == "mixed" && i%2 == 0 {
			unlink = append(unlink, id)
		}
		expire := cs == "expired" || (cs == "mixed" && i%2 == 1)
		if expire && variant != "baseline" {
			if err := root.SetTimeout(id, 1); err != nil {
				return row{}, 0, err
			}
		}
	}
	for i := range 64 {
		if _, err := root.AddKey("user", fmt.Sprintf("w%d", i), payload, work); err != nil {
			return row{}, 0, err
		}
	}
	// Every variant starts from the same Go heap state: right after the
	// fill, a mark phase of the million-key heap may or may not be due
	// within the window, and its workers take both processors for 20 ms
	// at a time (a runtime trace shows it), which would decide the worst
	// foreground operation more than the key collector does.
	runtime.GC()
	if p.TraceDir != "" {
		f, err := os.Create(filepath.Join(p.TraceDir, cs+"-"+variant+".trace"))
		if err != nil {
			return row{}, 0, err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return row{}, 0, err
		}
		defer trace.Stop()
	}
	before := s.GCStats()
	destroyedBefore := s.DestroyedKeys()

	// Foreground load.
	h := hdrhistogram.New(1, int64(10*time.Second), 3)
	var hmu sync.Mutex
	var stop atomic.Bool
	var wg sync.WaitGroup
	lastDone := atomic.Int64{}
	maxGap := atomic.Int64{}
	lastDone.Store(time.Now().UnixNano())
	for g := range p.Foreground {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := s.NewCaller(keys.Cred{UID: 0, GID: 0, PID: 100 + g})
			defer c.Release()
			local := hdrhistogram.New(1, int64(10*time.Second), 3)
			for i := 0; !stop.Load(); i++ {
				t0 := time.Now()
				var err error
				switch i % 3 {
				case 0:
					_, err = c.Read(mustSearch(root, work, fmt.Sprintf("w%d", i%64)))
				case 1:
					_, err = root.Search(work, "user", fmt.Sprintf("w%d", i%64), 0)
				case 2:
					_, err = root.AddKey("user", fmt.Sprintf("w%d", i%64), payload, work)
				}
				_ = err
				t1 := time.Now()
				_ = local.RecordValue(max(t1.Sub(t0).Nanoseconds(), 1))
				prev := lastDone.Swap(t1.UnixNano())
				if gap := t1.UnixNano() - prev; gap > maxGap.Load() {
					maxGap.Store(gap)
				}
			}
			hmu.Lock()
			h.Merge(local)
			hmu.Unlock()
		}()
	}
	probeH := hdrhistogram.New(1, int64(time.Hour), 3)
	var probeAt atomic.Int64
	probe := workqueue.NewWork("probe", func() {
		_ = probeH.RecordValue(max(time.Now().UnixNano()-probeAt.Load(), 1))
	})
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		for !stop.Load() {
			if !probe.Pending() {
				probeAt.Store(time.Now().UnixNano())
				wq.Schedule(probe)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(20 * time.Millisecond)

	// Make the garbage.
	faultsBefore := minorFaults()
	start := time.Now()
	switch {
	case variant == "baseline":
		// The keys stay live: nothing to reap.
	case cs == "unused" || cs == "mixed":
		if cs == "unused" {
			_ = root.Clear(garbage)
		} else {
			// Unlink the non-expiring half, one keyctl_unlink each; the
			// other half expires.
			for _, id := range unlink {
				if err := root.Unlink(id, garbage); err != nil {
					return row{}, 0, fmt.Errorf("unlinking key %d: %w", id, err)
				}
			}
		}
	}
	made := time.Since(start)
	if variant != "baseline" && (cs == "expired" || cs == "mixed") {
		clock.advance(2 * time.Second)
		s.RequestGC()
	}
	var reap time.Duration
	if variant == "baseline" {
		time.Sleep(max(baselineFor, 100*time.Millisecond))
		reap = 0
	} else {
		want := destroyedBefore + int64(n)
		for s.DestroyedKeys() < want {
			time.Sleep(time.Millisecond) // one atomic load: polling costs the collector nothing
			if time.Since(start) > 5*time.Minute {
				return row{}, 0, fmt.Errorf("gc %s/%s: reaping did not finish", cs, variant)
			}
		}
		reap = time.Since(start)
	}
	stop.Store(true)
	wg.Wait()
	<-probeDone
	wq.Cancel(probe)
	st := s.GCStats()
	r := histRow(cs, variant, "us", h, 1e3)
	r.Extra = map[string]any{
		"max_work_item_ms":  float64(st.ItemTime.Max) / 1e6,
		"p999_work_item_ms": float64(st.ItemTime.P999) / 1e6,
		"reap_all_s":        reap.Seconds(),
		"make_garbage_s":    made.Seconds(),
		// What the collector took once the garbage was made: in the
		// mixed case, after the last of the benchmark's own unlinks.
		"reap_after_made_s":    max(reap-made, 0).Seconds(),
		"max_queue_wait_ms":    float64(probeH.Max()) / 1e6,
		"p999_queue_wait_ms":   float64(probeH.ValueAtQuantile(99.9)) / 1e6,
		"stall_ms":             float64(maxGap.Load()) / 1e6,
		"items":                float64(st.Items - before.Items),
		"max_scanned_per_item": float64(st.MaxScannedPerItem),
		// The process's page faults from making the garbage to the end:
		// where a fault is dear (10.6 µs of CPU for 4 KB in a guest
		// without hardware nested paging, against about 1 µs on bare
		// metal) they are most of the collector's and the foreground's
		// long tails, and huge pages for Go's heap (transparent huge
		// pages set to always) take nine in ten of them away.
		"minor_faults": float64(minorFaults() - faultsBefore),
	}
	if p.ItemCPU {
		r.Extra["max_work_item_cpu_ms"] = float64(st.ItemCPU.Max) / 1e6
		r.Extra["p999_work_item_cpu_ms"] = float64(st.ItemCPU.P999) / 1e6
	}
	return r, reap, nil
}

func mustSearch(c *keys.Caller, ring keys.Serial, desc string) keys.Serial {
	id, err := c.Search(ring, "user", desc, 0)
	if err != nil {
		return ring
	}
	return id
}

type benchClock struct {
	off atomic.Int64
}

func newBenchClock() *benchClock { return &benchClock{} }

func (c *benchClock) now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

func (c *benchClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// histRow summarises h (nanoseconds) in unit (div: nanoseconds per unit).
func histRow(cs, variant, unit string, h *hdrhistogram.Histogram, div float64) row {
	mean := h.Mean() / div
	sd := h.StdDev() / div
	return row{Case: cs, Variant: variant, Unit: unit, N: h.TotalCount(),
		Min: float64(h.Min()) / div, Avg: mean, Max: float64(h.Max()) / div, Var: sd * sd,
		P50: float64(h.ValueAtQuantile(50)) / div, P99: float64(h.ValueAtQuantile(99)) / div,
		P999: float64(h.ValueAtQuantile(99.9)) / div, hist: h, div: div}
}
