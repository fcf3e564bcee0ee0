package main

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/rcu"
)

// readParams are the parameters of the read scenario.
type readParams struct {
	DurationMS float64 `json:"duration_ms"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	Batch      int     `json:"batch"`
}

// readBatch is how many reads are timed together: one read costs less
// than reading the clock, so each sample is a batch's time per read.
const readBatch = 256

// readConfig is what the readers read: a small configuration-like value.
type readConfig struct {
	a, b, c, d uint64
}

// readVariant prepares a reader loop: body runs n reads on one goroutine
// and returns something derived from them so the reads are not elided.
type readVariant struct {
	name string
	// setup returns the per-goroutine read function and a cleanup run on
	// the same goroutine when it is done.
	setup func() (read func(n int) uint64, done func())
}

// runRead measures the cost of one read in each way, with 1..GOMAXPROCS
// goroutines reading at once and no writer, so what is measured is the
// read side alone: what the readers pay and whether they scale.
func runRead(p readParams, dur time.Duration, prog *progress) (report, error) {
	p.Batch = readBatch
	d := rcu.New(rcu.WithName("ukeybench-read"))
	defer d.Close()
	cfg := &readConfig{1, 2, 3, 4}
	val := rcu.NewValue(d, cfg, nil)
	var ap atomic.Pointer[readConfig]
	ap.Store(cfg)
	var mu sync.RWMutex
	locked := cfg

	svc := keys.New()
	defer svc.Close()
	caller := svc.NewCaller(keys.Cred{UID: 0, GID: 0, PID: 1})
	defer caller.Release()
	if _, err := caller.JoinSessionKeyring(nil); err != nil {
		return report{}, err
	}
	id, err := caller.AddKey("user", "bench", []byte("0123456789abcdef"), keys.SessionKeyring)
	if err != nil {
		return report{}, err
	}

	variants := []readVariant{
		{"rcu-read", func() (func(int) uint64, func()) {
			return func(n int) (s uint64) {
				for range n {
					sec := d.Read()
					c := val.Load()
					s += c.a + c.d
					sec.End()
				}
				return s
			}, func() {}
		}},
		{"checkpoint", func() (func(int) uint64, func()) {
			t := d.Register("reader")
			return func(n int) (s uint64) {
				for range n {
					c := val.Load()
					s += c.a + c.d
					t.Checkpoint()
				}
				return s
			}, t.Unregister
		}},
		{"rwmutex", func() (func(int) uint64, func()) {
			return func(n int) (s uint64) {
				for range n {
					mu.RLock()
					s += locked.a + locked.d
					mu.RUnlock()
				}
				return s
			}, func() {}
		}},
		{"atomic-pointer", func() (func(int) uint64, func()) {
			return func(n int) (s uint64) {
				for range n {
					c := ap.Load()
					s += c.a + c.d
				}
				return s
			}, func() {}
		}},
		{"keys-lookup", func() (func(int) uint64, func()) {
			return func(n int) (s uint64) {
				for range n {
					b, err := caller.Read(id)
					if err == nil {
						s += uint64(len(b))
					}
				}
				return s
			}, func() {}
		}},
	}

	var rows []row
	procs := runtime.GOMAXPROCS(0)
	prog.begin("read", procs*len(variants))
	for g := 1; g <= procs; g++ {
		for vi, v := range variants {
			r := readCell(g, v, dur)
			r.Case = fmt.Sprintf("goroutines-%d", g)
			rows = append(rows, r)
			prog.step((g-1)*len(variants) + vi + 1)
		}
	}
	prog.end()
	return report{Scenario: "read", Params: p, Results: rows}, nil
}

// readCell runs g readers of variant v for dur and summarises the time
// per read of each batch, in nanoseconds (recorded in picoseconds).
func readCell(g int, v readVariant, dur time.Duration) row {
	h := hdrhistogram.New(1, int64(time.Second)*1000, 3)
	var mu sync.Mutex
	var ops atomic.Int64
	var stop atomic.Bool
	var ready, wg sync.WaitGroup
	startGate := make(chan struct{})
	for range g {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			read, done := v.setup()
			defer done()
			local := hdrhistogram.New(1, int64(time.Second)*1000, 3)
			var n int64
			var acc uint64
			ready.Done()
			<-startGate
			for !stop.Load() {
				t0 := time.Now()
				acc += read(readBatch)
				el := time.Since(t0)
				_ = local.RecordValue(max(el.Nanoseconds()*1000/readBatch, 1))
				n += readBatch
			}
			ops.Add(n)
			sink.Add(acc)
			mu.Lock()
			h.Merge(local)
			mu.Unlock()
		}()
	}
	ready.Wait()
	start := time.Now()
	close(startGate)
	time.Sleep(dur)
	stop.Store(true)
	wg.Wait()
	el := time.Since(start)
	r := histRow("", v.name, "ns", h, 1000)
	total := ops.Load()
	r.Extra = map[string]any{
		"ops":        total,
		"mops_per_s": float64(total) / el.Seconds() / 1e6,
		// Wall-clock time per read on one goroutine: what each reader pays,
		// including waiting for the others.
		"ns_per_op": el.Seconds() * 1e9 * float64(g) / float64(max(total, 1)),
	}
	return r
}
