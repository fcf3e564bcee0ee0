package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// The handover scenario: a daemon holding many keys is replaced by
// another (as ukeyd -takeover does) while clients read keys in a loop on
// their open connections. Each daemon is a process of its own (this
// program, in a child mode), so that each one's peak memory is its own.

// handoverEnv makes this program one of the scenario's daemons:
// "old:SOCKET:KEYS" or "new:SOCKET".
const handoverEnv = "UKEYBENCH_HANDOVER_DAEMON"

// handoverProfileEnv names a directory into which each daemon writes a
// CPU profile of its part of the hand-over (old.pprof: from serving the
// readers until it has handed over; new.pprof: from its start until it
// serves).
const handoverProfileEnv = "UKEYBENCH_CPUPROFILE"

// startProfile starts a CPU profile into dir/name if dir is set, and
// returns what stops it.
func startProfile(dir, name string) func() {
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		fmt.Fprintln(os.Stderr, "ukeybench handover daemon:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "ukeybench handover daemon:", err)
		f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// cpuTime returns the CPU time this process has used, user and system
// together, and the system's part (page faults, mostly, as the heap
// grows).
func cpuTime() (all, sys time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), time.Duration(ru.Stime.Nano())
}

// handoverParams are the parameters of the handover scenario.
type handoverParams struct {
	Keys     int     `json:"keys"`
	Keyrings int     `json:"keyrings"`
	Clients  int     `json:"clients"`
	BeforeMS float64 `json:"before_ms"` // reading before the hand-over
	AfterMS  float64 `json:"after_ms"`  // and after
}

// runHandover measures one hand-over.
func runHandover(p handoverParams, prog *progress) (report, error) {
	dir, err := os.MkdirTemp("", "ukeybench-")
	if err != nil {
		return report{}, err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "ukeyd.sock")
	exe, err := os.Executable()
	if err != nil {
		return report{}, err
	}
	prog.begin(fmt.Sprintf("handover: the old daemon makes %d keys", p.Keys), 0)
	old, err := startHandoverDaemon(exe, fmt.Sprintf("old:%s:%d:%d", sock, p.Keys, p.Keyrings))
	if err != nil {
		prog.end()
		return report{}, err
	}
	defer old.kill()
	line, err := old.expect("serials ")
	prog.end()
	if err != nil {
		return report{}, err
	}
	var serials []keys.Serial
	for _, f := range strings.Fields(line) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return report{}, fmt.Errorf("the old daemon's serials: %w", err)
		}
		serials = append(serials, keys.Serial(n))
	}

	// The readers, each on a connection of its own.
	conns := make([]*client.Client, p.Clients)
	for i := range conns {
		if conns[i], err = client.Dial(sock); err != nil {
			return report{}, err
		}
		defer conns[i].Close()
	}
	var stop atomic.Bool
	var failed firstError
	var errorsN atomic.Int64
	var longest atomic.Int64 // ns
	var ops atomic.Int64
	h := newHist()
	var hmu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			local := newHist()
			for !stop.Load() {
				id := serials[r.IntN(len(serials))]
				t0 := time.Now()
				_, err := c.Read(id)
				d := time.Since(t0)
				if err != nil {
					errorsN.Add(1)
					failed.set(err)
					return
				}
				ops.Add(1)
				record(local, d)
				for {
					cur := longest.Load()
					if int64(d) <= cur || longest.CompareAndSwap(cur, int64(d)) {
						break
					}
				}
			}
			hmu.Lock()
			h.Merge(local)
			hmu.Unlock()
		}()
	}
	prog.begin("handover: reading before", 0)
	time.Sleep(time.Duration(p.BeforeMS * float64(time.Millisecond)))
	prog.end()

	prog.begin("handover: taking over", 0)
	io.WriteString(old.stdin, "mark\n")
	start := time.Now()
	nu, err := startHandoverDaemon(exe, "new:"+sock)
	if err != nil {
		stop.Store(true)
		wg.Wait()
		prog.end()
		return report{}, err
	}
	defer nu.kill()
	took, err := nu.expect("took ")
	serving := time.Since(start)
	prog.end()
	if err != nil {
		stop.Store(true)
		wg.Wait()
		return report{}, err
	}
	oldCPU, err := old.expect("cpu ")
	if err != nil {
		stop.Store(true)
		wg.Wait()
		return report{}, err
	}
	oldHWM, err := old.expect("hwm ")
	if err != nil {
		stop.Store(true)
		wg.Wait()
		return report{}, err
	}
	prog.begin("handover: reading after", 0)
	time.Sleep(time.Duration(p.AfterMS * float64(time.Millisecond)))
	prog.end()
	stop.Store(true)
	wg.Wait()
	if e := failed.get(); e != nil {
		return report{}, fmt.Errorf("%d reads failed; the first: %w", errorsN.Load(), e)
	}
	newHWM, err := nu.hwm()
	if err != nil {
		return report{}, err
	}
	tookFields := strings.Fields(took) // "<seconds> keys <n> cpu <seconds> sys <seconds>"
	inDaemon, _ := strconv.ParseFloat(tookFields[0], 64)
	newCPU, _ := strconv.ParseFloat(tookFields[4], 64)
	newSys, _ := strconv.ParseFloat(tookFields[6], 64)
	oldFields := strings.Fields(oldCPU) // "<seconds> sys <seconds>"
	oldCPUs, _ := strconv.ParseFloat(oldFields[0], 64)
	oldSys, _ := strconv.ParseFloat(oldFields[2], 64)
	r := histRow(fmt.Sprintf("keys-%d", p.Keys), fmt.Sprintf("clients-%d", p.Clients), "us", h, 1e3)
	r.Extra = map[string]any{
		"serving_s":         serving.Seconds(),
		"takeover_s":        inDaemon,
		"new_cpu_s":         newCPU,
		"new_sys_s":         newSys,
		"old_cpu_s":         oldCPUs,
		"old_sys_s":         oldSys,
		"longest_pause_ms":  float64(longest.Load()) / 1e6,
		"errors":            errorsN.Load(),
		"reads":             ops.Load(),
		"old_peak_rss_mib":  kbToMiB(oldHWM),
		"new_peak_rss_mib":  kbToMiB(newHWM),
		"keys_handed_over":  tookFields[2],
		"old_exited_status": old.wait(),
	}
	return report{Scenario: "handover", Params: p, Results: []row{r}}, nil
}

func kbToMiB(s string) float64 {
	kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "kB")), 64)
	return kb / 1024
}

// handoverDaemon is a daemon child of the scenario.
type handoverDaemon struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
	stdin io.WriteCloser
	done  chan error
}

func startHandoverDaemon(exe, mode string) (*handoverDaemon, error) {
	d := &handoverDaemon{cmd: exec.Command(exe), done: make(chan error, 1)}
	d.cmd.Env = append(os.Environ(), handoverEnv+"="+mode)
	d.cmd.Stderr = os.Stderr
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if d.stdin, err = d.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	d.lines = bufio.NewScanner(out)
	d.lines.Buffer(make([]byte, 1<<20), 16<<20)
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	return d, nil
}

// expect reads lines until one starts with prefix, and returns its rest.
func (d *handoverDaemon) expect(prefix string) (string, error) {
	for d.lines.Scan() {
		if rest, ok := strings.CutPrefix(d.lines.Text(), prefix); ok {
			return rest, nil
		}
	}
	return "", fmt.Errorf("the daemon ended before saying %q: %v", strings.TrimSpace(prefix), d.lines.Err())
}

// hwm asks the daemon to exit and returns its peak resident memory.
func (d *handoverDaemon) hwm() (string, error) {
	d.stdin.Close()
	return d.expect("hwm ")
}

func (d *handoverDaemon) wait() int {
	d.cmd.Wait()
	return d.cmd.ProcessState.ExitCode()
}

func (d *handoverDaemon) kill() {
	if d.cmd.ProcessState == nil {
		d.cmd.Process.Kill()
		d.cmd.Wait()
	}
}

// peakRSS returns this process's VmHWM line's value.
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "0 kB"
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "0 kB"
}

// handoverDaemonMain is this program as one of the scenario's daemons.
func handoverDaemonMain(mode string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "ukeybench handover daemon:", err)
		return 1
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	parts := strings.Split(mode, ":")
	switch {
	case parts[0] == "old" && len(parts) == 4:
		n, _ := strconv.Atoi(parts[2])
		rings, _ := strconv.Atoi(parts[3])
		tun := keys.DefaultTunables()
		tun.RootMaxKeys, tun.RootMaxBytes = n+1000, 64*(n+1000)
		svc := keys.New(keys.WithTunables(tun))
		c := svc.NewCaller(keys.Cred{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid()), PID: 1})
		var ids []keys.Serial
		var rs []keys.Serial
		for i := range max(rings, 1) {
			r, err := c.AddKey("keyring", fmt.Sprintf("ring%d", i), nil, keys.UserKeyring)
			if err != nil {
				return fail(err)
			}
			rs = append(rs, r)
		}
		payload := []byte("0123456789abcdef")
		for i := range n {
			id, err := c.AddKey("user", fmt.Sprintf("k%d", i), payload, rs[i%len(rs)])
			if err != nil {
				return fail(err)
			}
			if i%(max(n/1024, 1)) == 0 {
				ids = append(ids, id)
			}
			if err := c.SetPerm(id, keys.PermMask); err != nil {
				return fail(err)
			}
		}
		c.Release() // the keys stay: the user keyring holds them
		srv := server.New(svc, server.Config{Logger: quiet, ReadTimeout: time.Minute, Limits: server.Limits{MaxConnsPerUID: 1024}})
		ln, err := server.Listen(parts[1])
		if err != nil {
			return fail(err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		var b strings.Builder
		b.WriteString("serials")
		for _, id := range ids {
			fmt.Fprintf(&b, " %d", id)
		}
		// The bench says when the new daemon starts (a line on stdin):
		// from then on, this daemon's CPU time and profile are the
		// hand-over's.
		marked := make(chan func() (time.Duration, time.Duration), 1)
		go func() {
			bufio.NewReader(os.Stdin).ReadString('\n')
			cpu0, sys0 := cpuTime()
			stop := startProfile(os.Getenv(handoverProfileEnv), "old.pprof")
			marked <- func() (time.Duration, time.Duration) {
				stop()
				cpu, sys := cpuTime()
				return cpu - cpu0, sys - sys0
			}
		}()
		fmt.Println(b.String())
		<-srv.HandedOver()
		<-served
		select {
		case end := <-marked:
			cpu, sys := end()
			fmt.Printf("cpu %.6f sys %.6f\n", cpu.Seconds(), sys.Seconds())
		default:
		}
		fmt.Println("hwm", peakRSS())
		return 0
	case parts[0] == "new" && len(parts) == 2:
		start := time.Now()
		stop := startProfile(os.Getenv(handoverProfileEnv), "new.pprof")
		res, err := server.TakeOver(parts[1], nil, server.Config{Logger: quiet, ReadTimeout: time.Minute, Limits: server.Limits{MaxConnsPerUID: 1024}})
		if err != nil {
			return fail(err)
		}
		served := make(chan error, 1)
		go func() { served <- res.Server.Serve(res.Listeners[0]) }()
		took := time.Since(start)
		stop()
		cpu, sys := cpuTime()
		fmt.Printf("took %.6f keys %d cpu %.6f sys %.6f\n", took.Seconds(), res.Keys, cpu.Seconds(), sys.Seconds())
		io.Copy(io.Discard, os.Stdin)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res.Server.Shutdown(ctx)
		if err := <-served; !errors.Is(err, server.ErrClosed) {
			return fail(err)
		}
		fmt.Println("hwm", peakRSS())
		return 0
	}
	return fail(fmt.Errorf("bad mode %q", mode))
}
