package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/server"
)

// runNamespaces runs the seccomp agent in this process, wired as ukeyd
// wires it, and one container ("measured", its own pid and mount
// namespaces) whose process reads a small user key of its namespace
// through the kernel's keyctl, intercepted, as fast as it can. For each
// of p.Counts in turn the agent first holds that many key namespaces:
// the measured one and idle containers, each a process of ours in pid
// and mount namespaces of its own whose listener is handed to the agent
// over its socket as runc hands one (the agent's own path: its judge,
// container.Of, join, a Server's listener); then the measured process
// reads for dur. The first count is measured again at the end, so that
// a machine whose load drifted shows it. Each window also says the
// daemon's heap in use (after a collection) and goroutines, from which
// the notes give what one idle namespace costs.
func runNamespaces(p namespacesParams, dur time.Duration, prog *progress) (_ report, err error) {
	if os.Geteuid() != 0 {
		return report{}, errors.New("the namespaces scenario needs root: its containers are pid and mount namespaces, handed to the agent as a runtime hands them")
	}
	if !intercept.Available() {
		return report{}, errors.New("the namespaces scenario needs seccomp user notification (its containers' key calls are intercepted)")
	}
	dir, err := os.MkdirTemp("", "ukeybench-namespaces-")
	if err != nil {
		return report{}, err
	}
	defer os.RemoveAll(dir)
	exe, err := os.Executable()
	if err != nil {
		return report{}, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lim := server.DefaultLimits(server.NoFile())
	ag := agent.New(agent.Config{Logger: log, Server: server.Config{Logger: log, Limits: lim},
		MaxContainers: max(agent.DefaultMaxContainers, slicesMax(p.Counts))})
	agentSock := filepath.Join(dir, "agent.sock")
	aln, err := server.Listen(agentSock)
	if err != nil {
		return report{}, err
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- ag.Serve(aln) }()

	e := &tenantsEnv{dir: dir, exe: exe, agentSock: agentSock, dur: dur}
	var idle []*idleCtr
	defer func() {
		endIdle(idle)
		e.endAll()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if e := ag.Shutdown(ctx); e != nil && err == nil {
			err = e
		}
		<-agentDone
	}()

	prog.say("namespaces: starting the measured container")
	measured, err := e.startContainer("measured container", "measured", "ctr-victim")
	if err != nil {
		return report{}, err
	}
	if _, err := measured.ready(time.Minute); err != nil {
		return report{}, err
	}
	counts := append(append([]int(nil), p.Counts...), p.Counts[0])
	var rows []row
	var heap0 uint64
	var gor0, n0 int
	var costs []string
	for w, n := range counts {
		if n < 1 {
			return report{}, fmt.Errorf("%d namespaces: the measured container's is one", n)
		}
		if want := n - 1; len(idle) < want {
			prog.begin(fmt.Sprintf("namespaces: making %d idle containers", want-len(idle)), want-len(idle))
			more, err := startIdle(exe, agentSock, len(idle), want-len(idle), prog)
			idle = append(idle, more...)
			prog.end()
			if err != nil {
				return report{}, err
			}
		} else if len(idle) > want {
			prog.say(fmt.Sprintf("namespaces: ending %d idle containers", len(idle)-want))
			endIdle(idle[want:])
			idle = idle[:want]
		}
		if err := waitContainers(ag, n, 2*time.Minute); err != nil {
			return report{}, err
		}
		heap, gor := daemonCost()
		prog.say(fmt.Sprintf("namespaces: %d namespaces, measuring for %v", n, dur))
		cpu0, t0 := processCPU(), time.Now()
		if err := measured.say("measure"); err != nil {
			return report{}, err
		}
		l, err := measured.expect(dur + 2*time.Minute)
		if err != nil {
			return report{}, err
		}
		cpus := (processCPU() - cpu0).Seconds() / time.Since(t0).Seconds()
		var res victimResult
		if err := json.Unmarshal([]byte(l), &res); err != nil {
			return report{}, fmt.Errorf("the measured container said %q: %w", l, err)
		}
		if res.Errors > 0 {
			return report{}, fmt.Errorf("%d namespaces: %d of %d reads failed, the first: %s", n, res.Errors, res.Calls, res.FirstError)
		}
		name := "namespaces-" + strconv.Itoa(n)
		if w == len(counts)-1 {
			name += "-again"
		}
		r := histRow(name, "intercepted", "us", hdrhistogram.Import(res.Hist), 1e3)
		r.Extra = map[string]any{
			"calls_per_s": float64(res.Calls) / dur.Seconds(),
			"daemon_cpus": cpus,
			"heap_kib":    float64(heap) / 1024,
			"goroutines":  float64(gor),
		}
		if w == 0 {
			heap0, gor0, n0 = heap, gor, n
		} else if n > n0 {
			costs = append(costs, fmt.Sprintf("%d namespaces against %d: %.0f KiB of heap and %.2f goroutines each",
				n, n0, (float64(heap)-float64(heap0))/1024/float64(n-n0), float64(gor-gor0)/float64(n-n0)))
		}
		rows = append(rows, r)
	}
	// Each window against the baseline: the mean of the first count's
	// two windows, which bracket the others, so that a machine whose
	// load drifts during the run moves both; the last window against
	// the first says how much it drifted.
	first, again := rows[0], rows[len(rows)-1]
	for i := range rows[1:] {
		r := rows[1+i]
		if i+1 == len(rows)-1 {
			r.Extra["p50_vs_baseline"], r.Extra["p99_vs_baseline"] = r.P50/first.P50, r.P99/first.P99
			continue
		}
		r.Extra["p50_vs_baseline"] = r.P50 / ((first.P50 + again.P50) / 2)
		r.Extra["p99_vs_baseline"] = r.P99 / ((first.P99 + again.P99) / 2)
	}
	p.NoFile, p.GOMAXPROCS = server.NoFile(), runtime.GOMAXPROCS(0)
	rep := report{Scenario: "namespaces", Params: p, Results: rows}
	rep.notes = []string{namespacesNote(rows), "What an idle namespace costs the daemon (heap in use after a collection; target 64 KiB and no goroutine):\n" +
		strings.Join(costs, "\n")}
	return rep, nil
}

func slicesMax(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// namespacesNote is the comparison: each window's p50 and p99
// against the baseline's (target: within 1.2x); the baseline's second
// window's against its first.
func namespacesNote(rows []row) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-22s %9s %9s %9s %10s %10s\n", "namespaces", "p50 µs", "p99 µs", "calls/s", "p50/base", "p99/base")
	for _, r := range rows {
		ratio := func(k string) string {
			if v, ok := r.Extra[k].(float64); ok {
				return strconv.FormatFloat(v, 'f', 2, 64)
			}
			return "-"
		}
		fmt.Fprintf(&sb, "%-22s %9s %9s %9s %10s %10s\n", r.Case, fmtFig(r.P50), fmtFig(r.P99), fmtFig(r.Extra["calls_per_s"].(float64)),
			ratio("p50_vs_baseline"), ratio("p99_vs_baseline"))
	}
	return strings.TrimRight(sb.String(), "\n")
}

// daemonCost is this process's heap in use after a collection, and its
// goroutines, once they have settled.
func daemonCost() (heap uint64, goroutines int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, runtime.NumGoroutine()
}

// waitContainers waits until the agent holds n containers.
func waitContainers(ag *agent.Agent, n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		got := len(ag.Containers())
		if got == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent holds %d containers after %v, want %d", got, d, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// idleCtr is an idle container: its init waits on the hand-off socket
// until ours is closed.
type idleCtr struct {
	cmd    *exec.Cmd
	ours   *os.File
	stderr *lockedBuf
}

// startIdle starts n idle containers, idle-<from>.., a few at a time.
func startIdle(exe, agentSock string, from, n int, prog *progress) ([]*idleCtr, error) {
	out := make([]*idleCtr, n)
	var next, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				c, err := startOneIdle(exe, agentSock, "idle-"+strconv.Itoa(from+i))
				if err != nil {
					errs <- err
					next.Store(int64(n)) // the others stop too
					return
				}
				out[i] = c
				prog.step(int(done.Add(1)))
			}
		}()
	}
	wg.Wait()
	close(errs)
	var kept []*idleCtr
	for _, c := range out {
		if c != nil {
			kept = append(kept, c)
		}
	}
	return kept, <-errs
}

// startOneIdle starts this program as the init of container id, under
// the filter, and hands its listener to the agent as runc does.
func startOneIdle(exe, agentSock, id string) (*idleCtr, error) {
	c := &idleCtr{cmd: exec.Command(exe), stderr: &lockedBuf{}}
	c.cmd.Env = []string{idleEnv + "=1", "GOMAXPROCS=1", "GORACE=atexit_sleep_ms=0"}
	c.cmd.Stderr = c.stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	ours, err := startHandingOff(c.cmd, c.cmd.Start)
	if err != nil {
		return nil, err
	}
	c.ours = ours
	if err := handToAgent(agentSock, id, c.cmd.Process.Pid, int(ours.Fd())); err != nil {
		c.end()
		return nil, fmt.Errorf("idle container %s: %w %s", id, err, c.stderr.String())
	}
	return c, nil
}

// end closes the hand-off socket, which ends the container's init, and
// reaps it.
func (c *idleCtr) end() {
	c.ours.Close()
	c.cmd.Wait()
}

func endIdle(cs []*idleCtr) {
	for _, c := range cs {
		c.ours.Close()
	}
	for _, c := range cs {
		c.cmd.Wait()
	}
}

// startHandingOff starts cmd with start, the other end of a socket pair
// its descriptor 3, on which it hands its listener off
// ([intercept.HandOff]); it returns our end, or closes both where start
// fails.
func startHandingOff(cmd *exec.Cmd, start func() error) (ours *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	cmd.ExtraFiles = []*os.File{theirs}
	err = start()
	theirs.Close()
	if err != nil {
		ours.Close()
		return nil, err
	}
	return ours, nil
}

// handToAgent receives the listener of process pid, the init of
// container id, on its hand-off socket conn, hands it to the agent at
// agentSock in a state as runc's, and tells the process it is served.
func handToAgent(agentSock, id string, pid, conn int) error {
	listener, err := intercept.ReceiveListener(conn)
	if err != nil {
		return fmt.Errorf("no listener: %w", err)
	}
	defer unix.Close(listener)
	var st agent.ContainerProcessState
	st.OCIVersion, st.FDs, st.Pid = "1.0.2", []string{"seccompFd"}, pid
	st.State.ID, st.State.Status, st.State.Pid = id, "creating", pid
	msg, err := json.Marshal(st)
	if err != nil {
		return err
	}
	ac, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: agentSock, Net: "unix"})
	if err != nil {
		return err
	}
	_, _, err = ac.WriteMsgUnix(msg, unix.UnixRights(listener), nil)
	ac.Close()
	if err != nil {
		return err
	}
	_, err = unix.Write(conn, []byte{1})
	return err
}

// idleContainer is the init of an idle container: it hands its listener
// over and waits until its hand-off socket closes.
func idleContainer() int {
	if err := intercept.HandOff(3, false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var b [1]byte
	for {
		if n, err := unix.Read(3, b[:]); n <= 0 || err != nil && err != unix.EINTR {
			return 0
		}
	}
}
