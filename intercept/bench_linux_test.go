package intercept_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/wire"
)

const benchEnv = "INTERCEPT_BENCH_READS"

// benchChild makes n keyctl_read calls of a small user key from its
// locked thread, under the filter unless kernel, and prints each call's
// latency in nanoseconds, then the whole run's.
func benchChild(n int, kernel bool) int {
	runtime.LockOSThread()
	if kernel {
		if _, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); e != 0 {
			fmt.Println("kernel keyrings:", e)
			return 1
		}
	} else {
		if err := intercept.HandOff(3, false); err != nil {
			fmt.Println("install:", err)
			return 1
		}
	}
	typ, desc, payload := []byte("user\x00"), []byte("bench\x00"), []byte("0123456789abcdef")
	id, _, e := unix.Syscall6(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&typ[0])), uintptr(unsafe.Pointer(&desc[0])),
		uintptr(unsafe.Pointer(&payload[0])), uintptr(len(payload)), uintptr(0xfffffffd), 0)
	if e != 0 {
		fmt.Println("add_key:", e)
		return 1
	}
	buf := make([]byte, 64)
	lat := make([]int64, n)
	start := time.Now()
	for i := range n {
		t0 := time.Now()
		if _, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_READ, id, uintptr(unsafe.Pointer(&buf[0])), 64, 0, 0); e != 0 {
			fmt.Println("read:", e)
			return 1
		}
		lat[i] = int64(time.Since(t0))
	}
	total := time.Since(start)
	var b strings.Builder
	for _, l := range lat {
		b.WriteString(strconv.FormatInt(l, 10))
		b.WriteByte(' ')
	}
	fmt.Printf("%s\ntotal %d\n", b.String(), int64(total))
	return 0
}

// runBench runs procs children of n reads each, intercepted (served by a
// keys.Service in this process) or not, and reports the latencies of all
// calls and the calls per second of the slowest child.
func runBench(b *testing.B, procs, n int, kernel bool) {
	svc := keys.New()
	defer svc.Close()
	var mu sync.Mutex
	locals := map[int]*server.Local{}
	h := intercept.HandlerFunc(func(c intercept.Caller, r *wire.Request) *wire.Response {
		mu.Lock()
		lc := locals[c.Pid]
		if lc == nil {
			lc = server.NewLocal(svc, keys.Cred{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), PID: c.Pid})
			lc.Do(&wire.Request{Op: wire.OpJoinSession})
			locals[c.Pid] = lc
		}
		mu.Unlock()
		return lc.Do(r)
	})
	type kid struct {
		cmd  *exec.Cmd
		out  strings.Builder
		ours *os.File
		l    *intercept.Listener
		done chan error
	}
	kids := make([]*kid, procs)
	for i := range kids {
		k := &kid{done: make(chan error, 1)}
		k.cmd = exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
		mode := "intercepted"
		if kernel {
			mode = "kernel"
		}
		k.cmd.Env = append(os.Environ(), benchEnv+"="+strconv.Itoa(n)+":"+mode)
		k.cmd.Stdout = &k.out
		if !kernel {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			k.ours = os.NewFile(uintptr(fds[0]), "ours")
			theirs := os.NewFile(uintptr(fds[1]), "theirs")
			k.cmd.ExtraFiles = []*os.File{theirs}
			defer k.ours.Close()
			if err := k.cmd.Start(); err != nil {
				b.Fatal(err)
			}
			theirs.Close()
			listener, err := intercept.ReceiveListener(fds[0])
			if err != nil {
				k.cmd.Wait()
				b.Skipf("no listener: %v: %s", err, k.out.String())
			}
			if k.l, err = intercept.NewListener(listener, h); err != nil {
				b.Fatal(err)
			}
			go func() { k.done <- k.l.Serve() }()
		} else if err := k.cmd.Start(); err != nil {
			b.Fatal(err)
		}
		kids[i] = k
	}
	b.ResetTimer()
	for _, k := range kids {
		if k.ours != nil {
			k.ours.Write([]byte{1})
		}
	}
	var all []int64
	var slowest time.Duration
	for _, k := range kids {
		if err := k.cmd.Wait(); err != nil {
			b.Fatalf("child: %v\n%s", err, k.out.String())
		}
		if k.l != nil {
			<-k.done
			k.l.Close()
		}
		lines := strings.Split(strings.TrimSpace(k.out.String()), "\n")
		for _, f := range strings.Fields(lines[0]) {
			v, _ := strconv.ParseInt(f, 10, 64)
			all = append(all, v)
		}
		if tot, ok := strings.CutPrefix(lines[len(lines)-1], "total "); ok {
			v, _ := strconv.ParseInt(tot, 10, 64)
			slowest = max(slowest, time.Duration(v))
		}
	}
	b.StopTimer()
	for _, lc := range locals {
		lc.Close()
	}
	slices.Sort(all)
	pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / 1e3 }
	b.ReportMetric(float64(slowest.Nanoseconds())/float64(n), "ns/op") // per call of one caller
	b.ReportMetric(pct(0.5), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(procs*n)/slowest.Seconds(), "calls/s")
}

// BenchmarkRead is a keyctl_read of a small user key, made to the
// kernel and intercepted (served from a keys.Service in this process),
// by one caller and by four in parallel (each its own process and
// listener).
func BenchmarkRead(b *testing.B) {
	b.Run("kernel/1", func(b *testing.B) { runBench(b, 1, b.N, true) })
	b.Run("intercepted/1", func(b *testing.B) { runBench(b, 1, b.N, false) })
	b.Run("kernel/4", func(b *testing.B) { runBench(b, 4, b.N, true) })
	b.Run("intercepted/4", func(b *testing.B) { runBench(b, 4, b.N, false) })
}
