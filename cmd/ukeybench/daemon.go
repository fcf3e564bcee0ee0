package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// daemonParams are the parameters of the daemon scenario.
type daemonParams struct {
	Clients    []int   `json:"clients"`
	DurationMS float64 `json:"duration_ms"`
	// Garbage is how many keys become garbage as the gc-busy variant's
	// measurement begins; the collector reaps them meanwhile.
	Garbage int `json:"garbage"`
}

// runDaemon measures key reads over the daemon's socket with K clients,
// one connection each, with the collector idle and with it reaping.
func runDaemon(p daemonParams, dur time.Duration, prog *progress) (report, error) {
	var rows []row
	for _, k := range p.Clients {
		for _, variant := range []string{"idle", "gc-busy"} {
			r, err := daemonOnce(p, k, variant, dur, prog)
			if err != nil {
				return report{}, fmt.Errorf("daemon clients-%d/%s: %w", k, variant, err)
			}
			rows = append(rows, r)
		}
	}
	return report{Scenario: "daemon", Params: p, Results: rows}, nil
}

func daemonOnce(p daemonParams, k int, variant string, dur time.Duration, prog *progress) (_ row, err error) {
	dir, err := os.MkdirTemp("", "ukeybench-")
	if err != nil {
		return row{}, err
	}
	defer os.RemoveAll(dir)
	tun := keys.DefaultTunables()
	tun.GCDelay = 0
	tun.RootMaxKeys = max(tun.RootMaxKeys, p.Garbage+10_000)
	tun.RootMaxBytes = max(tun.RootMaxBytes, 64*(p.Garbage+10_000))
	svc := keys.New(keys.WithTunables(tun))
	defer svc.Close()
	srv := server.New(svc, server.Config{ReadTimeout: time.Minute, Limits: server.Limits{MaxConnsPerUID: k + 16}})
	path := filepath.Join(dir, "ukeyd.sock")
	ln, err := server.Listen(path)
	if err != nil {
		return row{}, err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if e := srv.Shutdown(ctx); e != nil && err == nil {
			err = e
		}
		if e := <-served; !errors.Is(e, server.ErrClosed) && err == nil {
			err = e
		}
	}()

	setup, err := client.Dial(path)
	if err != nil {
		return row{}, err
	}
	defer setup.Close()
	id, err := setup.AddKey("user", "bench", []byte("payload"), keys.UserKeyring)
	if err != nil {
		return row{}, err
	}
	if err := setup.SetPerm(id, keys.PermMask); err != nil {
		return row{}, err
	}

	// The garbage is made in process, beside the daemon's clients, so
	// that making it costs the measurement nothing; clearing its keyring
	// at the start of the measurement hands it all to the collector.
	var garbage keys.Serial
	gcCaller := svc.NewCaller(keys.Cred{UID: 0, GID: 0, PID: 2})
	defer gcCaller.Release()
	if variant == "gc-busy" {
		if _, err := gcCaller.JoinSessionKeyring(nil); err != nil {
			return row{}, err
		}
		garbage, err = gcCaller.AddKey("keyring", "garbage", nil, keys.SessionKeyring)
		if err != nil {
			return row{}, err
		}
		prog.begin(fmt.Sprintf("daemon clients-%d/%s: making garbage", k, variant), p.Garbage)
		payload := []byte("0123456789abcdef")
		for i := range p.Garbage {
			if _, err := gcCaller.AddKey("user", expiringKey(i), payload, garbage); err != nil {
				return row{}, fmt.Errorf("adding garbage key %d: %w", i, err)
			}
			if i%4096 == 0 {
				prog.step(i)
			}
		}
		prog.end()
	}

	conns := make([]*client.Client, k)
	for i := range conns {
		if conns[i], err = client.Dial(path); err != nil {
			return row{}, err
		}
		defer conns[i].Close()
	}
	before := svc.GCStats()
	destroyedBefore := svc.DestroyedKeys()
	h := newHist()
	var hmu sync.Mutex
	var stop atomic.Bool
	var failed firstError
	var wg sync.WaitGroup
	start := time.Now()
	reaped := make(chan time.Duration, 1)
	if variant == "gc-busy" {
		go func() {
			if err := gcCaller.Clear(garbage); err != nil {
				failed.set(err)
			}
			want := destroyedBefore + int64(p.Garbage)
			for svc.DestroyedKeys() < want && !stop.Load() {
				time.Sleep(time.Millisecond)
			}
			if svc.DestroyedKeys() >= want {
				reaped <- time.Since(start)
			}
			close(reaped)
		}()
	} else {
		close(reaped)
	}
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := newHist()
			for !stop.Load() {
				t0 := time.Now()
				if _, err := c.Read(id); err != nil {
					failed.set(err)
					return
				}
				record(local, time.Since(t0))
			}
			hmu.Lock()
			h.Merge(local)
			hmu.Unlock()
		}()
	}
	label := fmt.Sprintf("daemon clients-%d/%s", k, variant)
	prog.begin(label, 0)
	for deadline := start.Add(dur); time.Now().Before(deadline); {
		time.Sleep(min(100*time.Millisecond, time.Until(deadline)))
		prog.step(0)
	}
	prog.end()
	stop.Store(true)
	wg.Wait()
	el := time.Since(start)
	reapS := -1.0 // idle, or not reaped within the measurement
	if d, ok := <-reaped; ok {
		reapS = d.Seconds()
	}
	if e := failed.get(); e != nil {
		return row{}, e
	}
	st := svc.GCStats()
	r := histRow(fmt.Sprintf("clients-%d", k), variant, "us", h, 1e3)
	r.Extra = map[string]any{
		"ops_per_s":        float64(h.TotalCount()) / el.Seconds(),
		"reap_s":           reapS,
		"gc_items":         st.Items - before.Items,
		"destroyed":        st.Destroyed - before.Destroyed,
		"max_work_item_ms": float64(st.ItemTime.Max) / 1e6,
	}
	return r, nil
}

// firstError keeps the first error reported by any goroutine.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
