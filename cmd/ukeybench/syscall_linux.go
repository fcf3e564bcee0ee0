package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// runSyscall measures keyctl_read of a small user key as a program makes
// it: intercepted by the floor (the least a supervisor can do, in C:
// floorSource), to the kernel, intercepted by ukeys (the program under the
// seccomp filter, its listener served by a Server in this process), and
// over the socket with the Go client; each by 1 or more callers, each a
// process of its own, in parallel. The intercepted rows say how many
// times the floor's latency they take (p50_x_floor, p99_x_floor).
func runSyscall(p syscallParams, dur time.Duration, prog *progress) (report, error) {
	var rows []row
	var notes []string
	dir, err := os.MkdirTemp("", "ukeybench-floor-")
	if err != nil {
		return report{}, err
	}
	defer os.RemoveAll(dir)
	variants := []string{"floor", "kernel", "intercepted", "socket"}
	if p.Variants != nil {
		for _, v := range p.Variants {
			if !slices.Contains(variants, v) {
				return report{}, fmt.Errorf("no variant %q: %v", v, variants)
			}
		}
		variants = slices.DeleteFunc(variants, func(v string) bool { return !slices.Contains(p.Variants, v) })
	}
	var floor string
	if slices.Contains(variants, "floor") {
		if floor, err = buildFloor(dir); err != nil {
			note := fmt.Sprintf("floor not measured: %v", err)
			prog.say("syscall " + note)
			notes = append(notes, note)
			variants = variants[1:]
		}
	}
	floors := map[int]row{}
	for _, variant := range variants {
		for _, k := range p.Callers {
			prog.say(fmt.Sprintf("syscall %s, %d callers", variant, k))
			r, err := syscallOnce(variant, k, dur, floor)
			if err != nil {
				return report{}, fmt.Errorf("syscall %s/%d: %w", variant, k, err)
			}
			if variant == "floor" {
				floors[k] = r
			} else if f, ok := floors[k]; ok && variant == "intercepted" {
				r.Extra["p50_x_floor"] = r.P50 / f.P50
				r.Extra["p99_x_floor"] = r.P99 / f.P99
			}
			rows = append(rows, r)
		}
	}
	return report{Scenario: "syscall", Params: p, Results: rows, notes: notes}, nil
}

// syscallOnce runs one variant with k callers; floor is the floor's
// program.
func syscallOnce(variant string, k int, dur time.Duration, floor string) (row, error) {
	dir, err := os.MkdirTemp("", "ukeybench-")
	if err != nil {
		return row{}, err
	}
	defer os.RemoveAll(dir)
	svc := keys.New()
	defer svc.Close()
	srv := server.New(svc, server.Config{ReadTimeout: time.Minute})
	sock := filepath.Join(dir, "ukeyd.sock")
	ln, err := server.Listen(sock)
	if err != nil {
		return row{}, err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
	}()
	exe, err := os.Executable()
	if err != nil {
		return row{}, err
	}
	type kid struct {
		cmd    *exec.Cmd
		ours   *os.File
		stderr *outBuf // what a caller that fails says why
		// floor is the caller's supervisor in the floor variant, and
		// what it says on its standard error.
		floor       *exec.Cmd
		floorStderr *outBuf
	}
	kids := make([]*kid, k)
	var wg sync.WaitGroup
	errs := make(chan error, k)
	for i := range kids {
		c := &kid{cmd: exec.Command(exe), stderr: &outBuf{}}
		c.cmd.Stdout = &outBuf{}
		c.cmd.Stderr = c.stderr
		childVariant := variant
		if variant == "floor" {
			childVariant = "intercepted" // the same caller, another supervisor
		}
		c.cmd.Env = append(os.Environ(), childEnv+"="+childVariant, "UKEYBENCH_DURATION="+dur.String(), "UKEYS_SOCKET="+sock)
		// Both hand their listener off on descriptor 3: to a supervisor
		// of their own (floor), or to this process's server.
		if variant == "floor" || variant == "intercepted" {
			ours, err := startHandingOff(c.cmd, c.cmd.Start)
			if err != nil {
				return row{}, err
			}
			c.ours = ours
			defer c.ours.Close()
		}
		if variant == "floor" {
			// The supervisor receives the listener on the socket, as
			// ReceiveListener does, and says when it serves.
			c.floor, c.floorStderr = exec.Command(floor), &outBuf{}
			c.floor.ExtraFiles = []*os.File{c.ours}
			c.floor.Stderr = c.floorStderr
			ready, err := c.floor.StdoutPipe()
			if err != nil {
				return row{}, err
			}
			if err := c.floor.Start(); err != nil {
				c.cmd.Wait()
				return row{}, err
			}
			defer c.floor.Process.Kill()
			var word [1]byte
			if _, err := ready.Read(word[:]); err != nil {
				c.cmd.Wait()
				c.floor.Wait()
				return row{}, fmt.Errorf("the floor did not serve (seccomp user notification unavailable?): %s", bytes.TrimSpace(c.floorStderr.b))
			}
		} else if variant == "intercepted" {
			listener, err := intercept.ReceiveListener(int(c.ours.Fd()))
			if err != nil {
				c.cmd.Wait()
				return row{}, fmt.Errorf("no listener from the caller (seccomp user notification unavailable?): %w", err)
			}
			go srv.ServeListener(listener)
		} else if err := c.cmd.Start(); err != nil {
			return row{}, err
		}
		kids[i] = c
	}
	// All at once.
	for _, c := range kids {
		if c.ours != nil {
			c.ours.Write([]byte{1})
		}
	}
	h := hdrhistogram.New(1, int64(time.Second), 3)
	var mu sync.Mutex
	var calls int64
	for _, c := range kids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := outputOf(c.cmd)
			if c.floor != nil {
				// It ends when its caller has (POLLHUP on the listener).
				if ferr := c.floor.Wait(); ferr != nil && err == nil {
					errs <- fmt.Errorf("floor: %w: %s", ferr, bytes.TrimSpace(c.floorStderr.b))
					return
				}
			}
			if err != nil {
				errs <- fmt.Errorf("%w: %s", err, bytes.TrimSpace(c.stderr.b))
				return
			}
			var res struct {
				Calls int64                  `json:"calls"`
				Hist  *hdrhistogram.Snapshot `json:"hist"`
			}
			if err := json.Unmarshal(out, &res); err != nil {
				errs <- fmt.Errorf("caller said %q: %w", out, err)
				return
			}
			mu.Lock()
			h.Merge(hdrhistogram.Import(res.Hist))
			calls += res.Calls
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return row{}, err
	}
	r := histRow("callers-"+strconv.Itoa(k), variant, "us", h, 1e3)
	r.Extra = map[string]any{"calls_per_s": float64(calls) / dur.Seconds()}
	return r, nil
}

// outputOf waits for a started command and returns its standard output,
// which it reads from a pipe set up here.
func outputOf(cmd *exec.Cmd) ([]byte, error) {
	err := cmd.Wait()
	if b, ok := cmd.Stdout.(*outBuf); ok {
		return b.b, err
	}
	return nil, err
}

// outBuf collects a caller's output.
type outBuf struct{ b []byte }

func (o *outBuf) Write(p []byte) (int, error) { o.b = append(o.b, p...); return len(p), nil }

// syscallChild is a caller of the syscall scenario: it reads a small
// user key as fast as it can for the duration and prints its calls and
// their latencies.
func syscallChild(variant string) int {
	if variant != "socket" {
		// The filter is the thread's: the calls must come from it. (A
		// client's goroutine is better left free: a locked one is woken
		// by a hand-off between threads at every answer.)
		runtime.LockOSThread()
	}
	dur, _ := time.ParseDuration(os.Getenv("UKEYBENCH_DURATION"))
	read := func() error { return nil }
	switch variant {
	case "kernel", "intercepted":
		if variant == "kernel" {
			if _, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); e != 0 {
				fmt.Fprintln(os.Stderr, "kernel keyrings:", e)
				return 1
			}
		} else {
			if err := intercept.HandOff(3, false); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		typ, desc, payload := []byte("user\x00"), []byte("bench\x00"), []byte("0123456789abcdef")
		id, _, e := unix.Syscall6(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&typ[0])), uintptr(unsafe.Pointer(&desc[0])),
			uintptr(unsafe.Pointer(&payload[0])), uintptr(len(payload)), uintptr(0xfffffffd), 0)
		if e != 0 {
			fmt.Fprintln(os.Stderr, "add_key:", e)
			return 1
		}
		buf := make([]byte, 64)
		read = func() error {
			if _, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_READ, id, uintptr(unsafe.Pointer(&buf[0])), 64, 0, 0); e != 0 {
				return e
			}
			return nil
		}
	case "socket":
		c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer c.Close()
		id, err := c.AddKey("user", "bench", []byte("0123456789abcdef"), keyctl.SessionKeyring)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		read = func() error { _, err := c.Read(id); return err }
	}
	h := hdrhistogram.New(1, int64(time.Second), 3)
	var calls int64
	for end := time.Now().Add(dur); time.Now().Before(end); calls++ {
		t0 := time.Now()
		if err := read(); err != nil {
			fmt.Fprintln(os.Stderr, "read:", err)
			return 1
		}
		h.RecordValue(max(int64(time.Since(t0)), 1))
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{"calls": calls, "hist": h.Export()})
	return 0
}
