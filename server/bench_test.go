package server_test

import (
	"sync"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
)

// BenchmarkRoundTrip reads a key over the socket from 16 concurrent
// clients (one connection each) and reports the round trip's p50/p99 and
// the daemon's throughput.
func BenchmarkRoundTrip(b *testing.B) {
	d := startDaemonB(b)
	setup, err := client.Dial(d.path)
	if err != nil {
		b.Fatal(err)
	}
	defer setup.Close()
	id, err := setup.AddKey("user", "bench", []byte("payload"), keys.UserKeyring)
	if err != nil {
		b.Fatal(err)
	}
	if err := setup.SetPerm(id, keys.PermMask); err != nil {
		b.Fatal(err)
	}
	const clients = 16
	h := hdrhistogram.New(1, int64(time.Second), 3)
	var mu sync.Mutex
	var wg sync.WaitGroup
	per := b.N/clients + 1
	b.ResetTimer()
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Dial(d.path)
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close()
			local := hdrhistogram.New(1, int64(time.Second), 3)
			for range per {
				t0 := time.Now()
				if _, err := c.Read(id); err != nil {
					b.Error(err)
					return
				}
				_ = local.RecordValue(time.Since(t0).Nanoseconds())
			}
			mu.Lock()
			h.Merge(local)
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.ReportMetric(float64(h.ValueAtQuantile(50))/1e3, "p50-µs")
	b.ReportMetric(float64(h.ValueAtQuantile(99))/1e3, "p99-µs")
	b.ReportMetric(float64(h.TotalCount())/el.Seconds(), "ops/s")
}
