package server_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/secmem"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/server/metrics"
	"github.com/ukeys/ukeys/wire"
)

// benchClients is the number of concurrent clients: separate connections,
// each reading one key after another.
const benchClients = 16

// BenchmarkRoundTrip reads a key over the socket from 16 concurrent
// clients (one connection each, sequential reads) and reports the round
// trip's p50/p99 and the daemon's throughput. The daemon runs as ukeyd
// does, with Prometheus metrics observing every operation. Variants:
//
//   - daemon: the clients read as fast as they can (closed loop), so by
//     Little's law the mean latency is 16 / throughput: it measures
//     capacity.
//   - collector: the same, while a background goroutine makes 25,600
//     unused keys a second for the collector to reap (reaped/s reports
//     what it did).
//   - single: one client alone: the round trip with nobody to queue
//     behind, for comparison.
//   - process: the 16 clients live in another process (this test binary
//     run again), as real clients do; the two processes' schedulers then
//     share the 2 cores through the kernel's.
//   - pipelined: the 16 clients are goroutines sharing one connection
//     made with client.WithPipelining, so that requests that meet go out
//     in one write and are answered in one; pipelined-collector is the
//     same with the collector reaping as in collector.
//   - echo: no daemon, the same 16 connections echoing frames of the
//     same sizes with plain net.Conn reads and writes (six system calls a
//     round trip, where the daemon and client make four): what a round
//     trip costs on this machine done the ordinary Go way, before any key
//     is read.
//
// With UKEYS_LOCKALL=1 the benchmark's process locks all its memory first,
// as the system daemon does (secmem.LockAll), so that what that costs is
// measured (the process variant's clients are another process, unlocked).
func BenchmarkRoundTrip(b *testing.B) {
	if os.Getenv("UKEYS_LOCKALL") == "1" && !secmem.LockedAll() {
		if err := secmem.LockAll(); err != nil {
			b.Fatalf("UKEYS_LOCKALL=1: %v", err)
		}
	}
	b.Run("daemon", func(b *testing.B) { benchDaemon(b, benchClients, false, false) })
	b.Run("collector", func(b *testing.B) { benchDaemon(b, benchClients, true, false) })
	b.Run("single", func(b *testing.B) { benchDaemon(b, 1, false, false) })
	b.Run("pipelined", func(b *testing.B) { benchDaemon(b, benchClients, false, true) })
	b.Run("pipelined-collector", func(b *testing.B) { benchDaemon(b, benchClients, true, true) })
	b.Run("process", benchProcess)
	b.Run("echo", benchEcho)
}

func benchDaemon(b *testing.B, nclients int, reaping, pipelined bool) {
	d := startDaemonCfg(b, server.Config{Metrics: metrics.New(prometheus.NewRegistry())})
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
	var stopGarbage func() uint64
	if reaping {
		stopGarbage = makeGarbage(b, d.svc)
	}
	clients := make([]*client.Client, nclients)
	for i := range clients {
		if pipelined && i > 0 {
			clients[i] = clients[0] // goroutines sharing one connection
			continue
		}
		var opts []client.Option
		if pipelined {
			opts = append(opts, client.WithPipelining())
		}
		if clients[i], err = client.Dial(d.path, opts...); err != nil {
			b.Fatal(err)
		}
		defer clients[i].Close()
	}
	read := func(c *client.Client) error {
		p, err := c.Read(id)
		if err == nil && len(p) != len("payload") {
			err = fmt.Errorf("read %d bytes", len(p))
		}
		return err
	}
	b.ResetTimer()
	h, el, err := drive(b.N, clients, read)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	report(b, h, el)
	if stopGarbage != nil {
		b.ReportMetric(float64(stopGarbage())/el.Seconds(), "reaped/s")
	}
}

// drive runs n operations spread over the clients, each client issuing
// its share one after another, and returns the latency histogram, the
// elapsed time and the first error.
func drive[C any](n int, clients []C, op func(C) error) (*hdrhistogram.Histogram, time.Duration, error) {
	h := hdrhistogram.New(1, int64(10*time.Second), 3)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	per := n/len(clients) + 1
	start := time.Now()
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := hdrhistogram.New(1, int64(10*time.Second), 3)
			var err error
			for range per {
				t0 := time.Now()
				if err = op(c); err != nil {
					break
				}
				_ = local.RecordValue(max(time.Since(t0).Nanoseconds(), 1))
			}
			mu.Lock()
			h.Merge(local)
			if first == nil {
				first = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return h, time.Since(start), first
}

func report(b *testing.B, h *hdrhistogram.Histogram, el time.Duration) {
	b.ReportMetric(float64(h.ValueAtQuantile(50))/1e3, "p50-µs")
	b.ReportMetric(float64(h.ValueAtQuantile(99))/1e3, "p99-µs")
	b.ReportMetric(float64(h.TotalCount())/el.Seconds(), "ops/s")
}

// makeGarbage keeps the collector reaping until the returned function is
// called, which reports how many keys it destroyed meanwhile: every 10 ms
// it adds 256 keys to a keyring and clears it.
func makeGarbage(b *testing.B, svc *keys.Service) func() uint64 {
	root := svc.NewCaller(keys.Cred{UID: 0, GID: 0, PID: 1})
	if _, err := root.JoinSessionKeyring(nil); err != nil {
		b.Fatal(err)
	}
	ring, err := root.AddKey("keyring", "garbage", nil, keys.SessionKeyring)
	if err != nil {
		b.Fatal(err)
	}
	before := svc.GCStats().Destroyed
	var stop atomic.Bool
	done := make(chan struct{})
	payload := []byte("0123456789abcdef")
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for n := 0; !stop.Load(); n++ {
			for i := range 256 {
				if _, err := root.AddKey("user", fmt.Sprintf("g%d.%d", n, i), payload, ring); err != nil {
					b.Error(err)
					return
				}
			}
			if err := root.Clear(ring); err != nil {
				b.Error(err)
				return
			}
			<-tick.C
		}
	}()
	return func() uint64 {
		stop.Store(true)
		<-done
		reaped := svc.GCStats().Destroyed - before
		root.Release()
		return reaped
	}
}

// benchEcho echoes, with plain net.Conn reads and writes, a request frame
// the size of a key read's and a response frame the size of its answer.
func benchEcho(b *testing.B) {
	path := filepath.Join(b.TempDir(), "echo.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		b.Fatal(err)
	}
	req, _ := wire.AppendRequest(nil, &wire.Request{Tag: 1, Op: wire.OpRead, Ints: []int64{1}})
	req, _ = wire.AppendFrame(nil, req)
	resp, _ := wire.AppendResponse(nil, &wire.Response{Tag: 1, Bufs: [][]byte{[]byte("payload")}})
	resp, _ = wire.AppendFrame(nil, resp)
	var served sync.WaitGroup
	served.Add(1)
	go func() {
		defer served.Done()
		var conns sync.WaitGroup
		defer conns.Wait()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				br := bufio.NewReaderSize(c, 16<<10)
				var body []byte
				for {
					if body, err = wire.ReadFrame(br, body); err != nil {
						return
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	type echo struct {
		c  net.Conn
		br *bufio.Reader
		in []byte
	}
	clients := make([]*echo, benchClients)
	for i := range clients {
		c, err := net.Dial("unix", path)
		if err != nil {
			b.Fatal(err)
		}
		clients[i] = &echo{c: c, br: bufio.NewReaderSize(c, 16<<10)}
	}
	b.ResetTimer()
	h, el, err := drive(b.N, clients, func(e *echo) error {
		if _, err := e.c.Write(req); err != nil {
			return err
		}
		var err error
		e.in, err = wire.ReadFrame(e.br, e.in)
		return err
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	report(b, h, el)
	for _, e := range clients {
		e.c.Close()
	}
	ln.Close()
	served.Wait()
}

// benchProcess drives the daemon from 16 clients in a child process.
func benchProcess(b *testing.B) {
	d := startDaemonCfg(b, server.Config{Metrics: metrics.New(prometheus.NewRegistry())})
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
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "UKEYS_TEST_CHILD=bench", "UKEYS_SOCKET="+d.path,
		"UKEYS_TEST_KEY="+strconv.Itoa(int(id)), "UKEYS_TEST_N="+strconv.Itoa(b.N))
	b.ResetTimer()
	out, err := cmd.Output()
	b.StopTimer()
	if err != nil {
		b.Fatalf("bench child: %v\n%s", err, out)
	}
	var p50, p99, ops float64
	if _, err := fmt.Sscan(string(out), &p50, &p99, &ops); err != nil {
		b.Fatalf("bench child said %q: %v", out, err)
	}
	b.ReportMetric(p50, "p50-µs")
	b.ReportMetric(p99, "p99-µs")
	b.ReportMetric(ops, "ops/s")
}

// childBench runs in the child process of benchProcess: 16 clients read
// key UKEYS_TEST_KEY, UKEYS_TEST_N times in all, and it prints p50 and
// p99 in µs and the reads per second.
func childBench() {
	id, _ := strconv.Atoi(os.Getenv("UKEYS_TEST_KEY"))
	n, _ := strconv.Atoi(os.Getenv("UKEYS_TEST_N"))
	clients := make([]*client.Client, benchClients)
	for i := range clients {
		c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer c.Close()
		clients[i] = c
	}
	h, el, err := drive(n, clients, func(c *client.Client) error {
		_, err := c.Read(keys.Serial(id))
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(float64(h.ValueAtQuantile(50))/1e3, float64(h.ValueAtQuantile(99))/1e3, float64(h.TotalCount())/el.Seconds())
}

// BenchmarkLocal reads a key through server.Local, the client package's
// in-process mode: a request served as the daemon serves it (dispatch),
// without a socket, so what serving one costs beyond the keys package
// shows alone (allocs/op).
func BenchmarkLocal(b *testing.B) {
	svc := keys.New()
	defer svc.Close()
	l := server.NewLocal(svc, keys.Cred{UID: 1000, GID: 1000, PID: os.Getpid()})
	defer l.Close()
	add := l.Do(&wire.Request{Op: wire.OpAddKey, Bufs: [][]byte{[]byte("user"), []byte("bench"), []byte("payload")}, Ints: []int64{int64(keys.UserKeyring)}})
	if add.Errno != 0 {
		b.Fatalf("add_key: errno %d", add.Errno)
	}
	req := wire.Request{Op: wire.OpRead, Ints: []int64{add.Ints[0]}}
	b.ReportAllocs()
	for b.Loop() {
		if r := l.Do(&req); r.Errno != 0 || len(r.Bufs[0]) != len("payload") {
			b.Fatalf("read: errno %d", r.Errno)
		}
	}
}
