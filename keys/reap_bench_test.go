package keys

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user and system time so far: on a shared
// machine a better measure of work than the wall clock.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReap measures the collector's work per key, with no foreground
// load: n keys linked from one keyring become garbage (expired, or unused
// by clearing the keyring), and the collector reaps them all. ns/key is
// the wall time from the moment they became garbage until the last was
// destroyed, divided by n; cpu-ns/key the process's CPU time over the
// same span (the collector's and Go's garbage collector's work, which a
// loaded machine does not inflate); max-item-us is the longest work item.
// UKEYS_REAP_KEYS=N changes n (1,000,000 for the collector issue's size).
func BenchmarkReap(b *testing.B) {
	n := 100_000
	if v := os.Getenv("UKEYS_REAP_KEYS"); v != "" {
		fmt.Sscan(v, &n)
	}
	for _, cs := range []string{"expired", "unused"} {
		for _, chunk := range []int{DefaultChunkSize, 0} {
			b.Run(fmt.Sprintf("%s/chunk=%d", cs, chunk), func(b *testing.B) {
				var total, cpu time.Duration
				var maxItem, maxCPU time.Duration
				for b.Loop() {
					b.StopTimer()
					clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
					tun := DefaultTunables()
					tun.GCDelay = 0
					tun.RootMaxKeys = n + 100
					tun.RootMaxBytes = 64 * (n + 100)
					// No release delay: the cleared links' keys become
					// garbage at the clear, as they did before the delay
					// (the kernel's RCU window) was, so that ns/key still
					// measures the collector's work alone.
					s := New(WithTunables(tun), WithClock(clk.now), withChunkSize(chunk), withItemCPUTime(), withReleaseDelay(0))
					c := s.NewCaller(Cred{UID: 0, GID: 0, PID: 1})
					if _, err := c.JoinSessionKeyring(nil); err != nil {
						b.Fatal(err)
					}
					ring := must(c.AddKey("keyring", "garbage", nil, SessionKeyring))(b)
					for i := range n {
						id := must(c.AddKey("user", fmt.Sprint("g", i), []byte("0123456789abcdef"), ring))(b)
						if cs == "expired" {
							if err := c.SetTimeout(id, 1); err != nil {
								b.Fatal(err)
							}
						}
					}
					if err := s.WaitGC(context.Background()); err != nil {
						b.Fatal(err)
					}
					before := s.DestroyedKeys()
					b.StartTimer()
					start, cpu0 := time.Now(), cpuTime()
					if cs == "expired" {
						clk.advance(2 * time.Second)
						s.RequestGC()
					} else if err := c.Clear(ring); err != nil {
						b.Fatal(err)
					}
					for s.DestroyedKeys() < before+int64(n) {
						time.Sleep(50 * time.Microsecond)
					}
					total += time.Since(start)
					cpu += cpuTime() - cpu0
					b.StopTimer()
					st := s.GCStats()
					maxItem = max(maxItem, st.ItemTime.Max)
					maxCPU = max(maxCPU, st.ItemCPU.Max)
					c.Release()
					if err := s.Close(); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*n), "ns/key")
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/key")
				b.ReportMetric(float64(maxItem.Microseconds()), "max-item-us")
				b.ReportMetric(float64(maxCPU.Microseconds()), "max-item-cpu-us")
			})
		}
	}
}
