package main

import (
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

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
)

// daemonPID asks the daemon at socket for its pid.
func daemonPID(t *testing.T, socket string) int {
	t.Helper()
	pid, err := strconv.Atoi(statusField(t, socket, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// statusField returns the value of the daemon's status line name.
func statusField(t *testing.T, socket, name string) string {
	t.Helper()
	c, err := client.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Status()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(st) {
		if v, ok := strings.CutPrefix(line, name+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in the status:\n%s", name, st)
	return ""
}

// ukeyd -takeover replaces a running daemon while clients loop on their
// open connections: the old daemon exits 0 with every goroutine stopped
// (the child checks), the new one answers on the same socket, nothing a
// client did fails, and every key is there.
func TestTakeoverUnderLoad(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "ukeyd.sock")
	old := startChild(t, socket)
	oldPID := daemonPID(t, socket)

	setup, err := client.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	if _, err := setup.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var failures atomic.Int64
	var firstErr atomic.Value
	added := make([][]keys.Serial, 4)
	var wg sync.WaitGroup
	for w := range added {
		c, err := client.Dial(socket)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for i := 0; !stop.Load(); i++ {
				id, err := c.AddKey("user", fmt.Sprintf("w%d-%d", w, i), []byte("v"), keys.SessionKeyring)
				if err == nil {
					added[w] = append(added[w], id)
					_, err = c.Read(id)
				}
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	nu := startChild(t, socket, childOpts{args: []string{"-takeover"}})
	if code := old.wait(t); code != 0 {
		t.Fatalf("the old daemon exited %d\n%s", code, old.stderrText())
	}
	if pid := daemonPID(t, socket); pid == oldPID || pid != nu.cmd.Process.Pid {
		t.Fatalf("pid %d answers; the old daemon was %d, the new one is %d", pid, oldPID, nu.cmd.Process.Pid)
	}
	time.Sleep(100 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d clients failed across the take-over: %v\nold:\n%s\nnew:\n%s", n, firstErr.Load(), old.stderrText(), nu.stderrText())
	}
	n := 0
	for _, ids := range added {
		for _, id := range ids {
			if _, err := setup.Describe(id); err != nil {
				t.Fatalf("key %d after the take-over: %v", id, err)
			}
			n++
		}
	}
	if !strings.Contains(old.stderrText(), "handed over to a new daemon") || !strings.Contains(nu.stderrText(), "took over") {
		t.Errorf("logs:\nold:\n%s\nnew:\n%s", old.stderrText(), nu.stderrText())
	}
	t.Logf("%d keys added across the take-over, all there", n)
	nu.cmd.Process.Signal(syscall.SIGTERM)
	if code := nu.wait(t); code != 0 {
		t.Fatalf("the new daemon exited %d\n%s", code, nu.stderrText())
	}
}

// With nothing to take over, ukeyd -takeover says so and exits 1.
func TestTakeoverWithoutDaemon(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "ukeyd.sock")
	cmd := exec.Command(os.Args[0], childArg, "-takeover", "-socket", socket, "-request-key", "")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), "no daemon to take over from") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
