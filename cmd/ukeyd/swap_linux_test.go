package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
)

// Payloads never reach swap: a daemon holding 400 distinct payloads is
// squeezed in a memory cgroup with a swap file present until the kernel
// has swapped out what it can of it; the daemon then stops, and the swap
// file, read from the disk, holds none of them. (On the code before the
// daemon locked its memory, 295 of 400 were found that way.)
//
// Twice: as the system daemon locks itself (all of it, mlockall: -lock-memory
// auto as root), and as a user daemon does (-lock-memory arena: only the
// arena of payloads and the buffers they cross; the rest of its memory is
// swapped out, and must hold no payload).
func TestPayloadsNeverSwapped(t *testing.T) {
	for _, mode := range []string{"auto", "arena"} {
		t.Run(mode, func(t *testing.T) { payloadsNeverSwapped(t, mode) })
	}
}

func payloadsNeverSwapped(t *testing.T, mode string) {
	sw := newSwapRig(t)
	socket := filepath.Join(t.TempDir(), "ukeyd.sock")
	d := startChild(t, socket, childOpts{env: []string{sw.env()}, args: []string{"-lock-memory", mode}})

	c, err := client.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	const n = 400
	payloads := make([][]byte, n)
	for i := range payloads {
		r := make([]byte, 12)
		rand.Read(r)
		payloads[i] = fmt.Appendf(nil, "swapped-secret-%s-%03d", hex.EncodeToString(r), i)
		typ := "user"
		if i%4 == 3 {
			typ = "big_key"
		}
		if _, err := c.AddKey(typ, fmt.Sprint("s", i), payloads[i], keys.SessionKeyring); err != nil {
			t.Fatal(err)
		}
	}
	// Read back, so that answers crossed the daemon's buffers too.
	for i := 0; i < n; i += 7 {
		id, err := c.Search(keys.SessionKeyring, "user", fmt.Sprint("s", i), 0)
		if err == nil {
			c.Read(id)
		}
	}
	// The status says what is locked.
	wantStatus := map[string]string{"auto": "memory_locked: all\n", "arena": "memory_locked: arena "}[mode]
	if st, err := c.Status(); err != nil || !strings.Contains(st, wantStatus) {
		t.Errorf("status (%v) without %q:\n%s", err, wantStatus, st)
	}
	swapped := sw.squeeze(t)
	c.Close()
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(t); code != 0 {
		t.Fatalf("the daemon exited %d\n%s", code, d.stderrText())
	}
	found := sw.scan(t, payloads)
	t.Logf("%d KiB of the daemon swapped out; %d of %d payloads found in swap", swapped>>10, found, n)
	if found > 0 {
		t.Errorf("%d of %d payloads found in swap after the daemon exited (%d KiB of it had been swapped out)", found, n, swapped>>10)
	}
	if mode == "arena" && swapped == 0 {
		t.Errorf("nothing swapped out of a daemon that locks only its arena: the squeeze did not work")
	}
	if swapped == 0 && !strings.Contains(d.stderrText(), "memory locked") {
		t.Errorf("nothing swapped out, yet the daemon did not say it locked its memory:\n%s", d.stderrText())
	}
}

// swapRig is a swap file and a memory cgroup, removed when the test ends.
type swapRig struct {
	file   string
	cgroup string
	v2     bool
}

func newSwapRig(t *testing.T) *swapRig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: swapon and a memory cgroup")
	}
	for _, p := range []string{"mkswap", "swapon", "swapoff"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("needs %s (Debian package util-linux)", p)
		}
	}
	if b, err := os.ReadFile("/proc/swaps"); err != nil || len(strings.Split(strings.TrimSpace(string(b)), "\n")) > 1 {
		t.Skipf("another swap device is active (%v): pages could go there, unscanned", err)
	}
	sw := &swapRig{}
	// A memory cgroup: v2 with its memory controller, or v1's.
	name := fmt.Sprintf("ukeys-swaptest-%d", os.Getpid())
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(b), "memory") {
		sw.cgroup, sw.v2 = filepath.Join("/sys/fs/cgroup", name), true
	} else if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		sw.cgroup = filepath.Join("/sys/fs/cgroup/memory", name)
	} else {
		t.Skip("needs a memory cgroup (cgroup v2 with the memory controller, or v1's memory hierarchy)")
	}
	if err := os.Mkdir(sw.cgroup, 0o755); err != nil {
		t.Skipf("cannot make a memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		// Whatever is left in it goes back to the root, then it goes.
		if b, err := os.ReadFile(filepath.Join(sw.cgroup, "cgroup.procs")); err == nil {
			parent := filepath.Dir(sw.cgroup)
			for _, pid := range strings.Fields(string(b)) {
				os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(pid), 0)
			}
		}
		for i := 0; i < 50; i++ {
			if err := os.Remove(sw.cgroup); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	if !sw.v2 {
		os.WriteFile(filepath.Join(sw.cgroup, "memory.swappiness"), []byte("100"), 0)
	}

	// A swap file of 64 MiB, written whole (no holes, which swapon
	// refuses), outside any tmpfs.
	dir, err := os.MkdirTemp("/var/tmp", "ukeys-swaptest-")
	if err != nil {
		t.Skipf("no directory for a swap file: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sw.file = filepath.Join(dir, "swap")
	f, err := os.OpenFile(sw.file, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, 1<<20)
	for range 64 {
		if _, err := f.Write(zero); err != nil {
			f.Close()
			t.Fatal(err)
		}
	}
	f.Sync()
	f.Close()
	if out, err := exec.Command("mkswap", sw.file).CombinedOutput(); err != nil {
		t.Skipf("mkswap: %v\n%s", err, out)
	}
	if out, err := exec.Command("swapon", sw.file).CombinedOutput(); err != nil {
		t.Skipf("swapon (a filesystem that cannot hold swap?): %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("swapoff", sw.file).CombinedOutput(); err != nil && !strings.Contains(string(out), "Invalid argument") {
			t.Errorf("swapoff: %v\n%s", err, out)
		}
	})
	return sw
}

// env is what puts a daemon child into the cgroup: it moves itself there
// before the runtime has made more than its first allocations (init),
// since a process's memory stays charged where it was first touched.
func (sw *swapRig) env() string { return cgroupEnv + "=" + sw.cgroup }

const cgroupEnv = "UKEYD_TEST_CGROUP"

func init() {
	if cg := os.Getenv(cgroupEnv); cg != "" && len(os.Args) > 1 && os.Args[1] == childArg {
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			fmt.Fprintln(os.Stderr, "ukeyd child: entering the cgroup:", err)
			os.Exit(4)
		}
	}
}

// squeeze makes the kernel reclaim what it can of the cgroup's memory
// (into swap), lifts the limit again, and returns how much was swapped.
func (sw *swapRig) squeeze(t *testing.T) int64 {
	t.Helper()
	if sw.v2 {
		for range 3 {
			// Fails with EAGAIN once nothing more can be reclaimed.
			os.WriteFile(filepath.Join(sw.cgroup, "memory.reclaim"), []byte("1G"), 0)
		}
		return sw.stat(t, "memory.swap.current", "")
	}
	limit := filepath.Join(sw.cgroup, "memory.limit_in_bytes")
	for _, l := range []string{"64M", "32M", "16M", "8M", "4M", "2M", "1M", "512K", "256K"} {
		// EBUSY where the kernel cannot get under it: locked memory.
		os.WriteFile(limit, []byte(l), 0)
	}
	swapped := sw.stat(t, "memory.stat", "swap")
	os.WriteFile(limit, []byte("-1"), 0)
	return swapped
}

// stat reads a number from the cgroup: a file's, or a memory.stat line's.
func (sw *swapRig) stat(t *testing.T, file, key string) int64 {
	b, err := os.ReadFile(filepath.Join(sw.cgroup, file))
	if err != nil {
		t.Logf("%s: %v", file, err)
		return 0
	}
	s := strings.TrimSpace(string(b))
	if key != "" {
		s = ""
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, " "); ok && k == key {
				s = v
			}
		}
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// scan turns the swap file off and reads it from the disk (O_DIRECT: the
// page cache still holds the zeros it was made of), counting payloads.
func (sw *swapRig) scan(t *testing.T, payloads [][]byte) int {
	t.Helper()
	if out, err := exec.Command("swapoff", sw.file).CombinedOutput(); err != nil {
		t.Fatalf("swapoff: %v\n%s", err, out)
	}
	fd, err := unix.Open(sw.file, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	var all []byte
	for {
		n, err := unix.Read(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		all = append(all, buf[:n]...)
	}
	found := 0
	for _, p := range payloads {
		if bytes.Contains(all, p) {
			found++
		}
	}
	return found
}

// Payloads that cross the socket never reach swap either: a user daemon
// (-lock-memory arena) is squeezed into swap again and again while
// clients add keys and read them back without pause, on connections of
// their own and pipelined ones, with payloads larger than a connection's
// small buffers (its 4 KiB frame, its 4 KiB read buffer) as well as
// small ones. Every frame a payload crosses (a request read, a read's
// answer, the buffers grown for either) is then in memory the squeeze
// may take; after the daemon exits, the swap file holds none of them.
// Each payload is a marker of its own, repeated to the payload's length,
// so that a fragment of one is found as surely as the whole.
func TestPayloadsNeverSwappedCrossingTheSocket(t *testing.T) {
	sw := newSwapRig(t)
	socket := filepath.Join(t.TempDir(), "ukeyd.sock")
	d := startChild(t, socket, childOpts{env: []string{sw.env()}, args: []string{"-lock-memory", "arena"}})

	setup, err := client.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	ring, err := setup.AddKey("keyring", "swap-crossing", nil, keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var markers [][]byte
	payload := func(i int) []byte {
		r := make([]byte, 10)
		rand.Read(r)
		m := fmt.Appendf(nil, "crossing-secret-%s-%04d|", hex.EncodeToString(r), i)
		mu.Lock()
		markers = append(markers, m)
		mu.Unlock()
		size := []int{len(m), 600, 6 << 10, 20 << 10, 32000}[i%5]
		return bytes.Repeat(m, size/len(m)+1)[:max(size, len(m))]
	}
	const n = 60
	ids := make([]keys.Serial, n)
	want := make([][]byte, n)
	for i := range ids {
		want[i] = payload(i)
		if ids[i], err = setup.AddKey("user", fmt.Sprint("c", i), want[i], ring); err != nil {
			t.Fatal(err)
		}
	}

	// Clients that read every key back in a loop (and one that adds new
	// keys), until the squeezes are done.
	var stop atomic.Bool
	var reads atomic.Int64
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	loop := func(c *client.Client, add bool, from int) {
		defer wg.Done()
		for i := from; !stop.Load(); i++ {
			if add {
				if i >= 300 {
					add = false // enough keys: it reads too from now on
					continue
				}
				if _, err := c.AddKey("user", fmt.Sprint("a", i), payload(n+i), ring); err != nil {
					errs <- fmt.Errorf("add: %w", err)
					return
				}
				continue
			}
			k := i % n
			got, err := c.Read(ids[k])
			if err != nil || !bytes.Equal(got, want[k]) {
				errs <- fmt.Errorf("read %d: %d bytes, %v", k, len(got), err)
				return
			}
			reads.Add(1)
		}
	}
	for w := range 4 {
		var opts []client.Option
		if w%2 == 1 {
			opts = append(opts, client.WithPipelining())
		}
		c, err := client.Dial(socket, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		goroutines := 1
		if w%2 == 1 {
			goroutines = 3 // sharing the connection: answers gathered in one frame buffer
		}
		for g := range goroutines {
			wg.Add(1)
			go loop(c, w == 0 && g == 0, g*7)
		}
	}
	var swapped int64
	for range 4 {
		time.Sleep(100 * time.Millisecond)
		swapped = max(swapped, sw.squeeze(t))
	}
	stop.Store(true)
	wg.Wait()
	setup.Close()
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(t); code != 0 {
		t.Fatalf("the daemon exited %d\n%s", code, d.stderrText())
	}
	if reads.Load() < n {
		t.Fatalf("only %d reads while squeezing", reads.Load())
	}
	found := sw.scan(t, markers)
	t.Logf("%d reads and %d adds while squeezed; %d KiB of the daemon swapped out; %d of %d payloads found in swap",
		reads.Load(), len(markers)-n, swapped>>10, found, len(markers))
	if found > 0 {
		t.Errorf("%d of %d payloads found in swap after the daemon exited (%d KiB of it had been swapped out)", found, len(markers), swapped>>10)
	}
	if swapped == 0 {
		t.Errorf("nothing swapped out of a daemon that locks only its arena: the squeeze did not work")
	}
}
