package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
)

// readyz returns the status of the daemon's GET /readyz.
func readyz(t *testing.T, d *child) int {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddrOf(t, d) + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A DaemonSet's rolling update (deploy/kubernetes/ukeyd.yaml) as its
// pods see it: every pod runs ukeyd -takeover auto -after-handover wait.
// The first, with no daemon on the socket, starts afresh; the next,
// started beside it, takes over (the key is there) and is ready; the old
// one neither serves nor exits, so that its kubelet does not start it
// again to take back over, is unready, and exits 0 on SIGTERM, when the
// DaemonSet deletes its pod.
func TestRollingUpdate(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "ukeyd.sock")
	pod := childOpts{args: []string{"-takeover=auto", "-after-handover", "wait"}}
	old := startChild(t, socket, pod)
	if !strings.Contains(old.stderrText(), "daemon_serving=false") {
		t.Fatalf("the first daemon did not start afresh:\n%s", old.stderrText())
	}
	testutil.Eventually(t, "the first daemon to be ready", func() bool { return readyz(t, old) == http.StatusOK })
	c, err := client.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id, err := c.AddKey("user", "rolling", []byte("v"), keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}

	nu := startChild(t, socket, pod)
	testutil.Eventually(t, "the old daemon to hand over and wait", func() bool {
		return strings.Contains(old.stderrText(), "waiting for SIGTERM")
	})
	if pid := daemonPID(t, socket); pid != nu.cmd.Process.Pid {
		t.Fatalf("pid %d answers, not the new daemon's %d", pid, nu.cmd.Process.Pid)
	}
	if !strings.Contains(nu.stderrText(), "daemon_serving=true") || !strings.Contains(nu.stderrText(), "took over") {
		t.Fatalf("the new daemon did not take over:\n%s", nu.stderrText())
	}
	if got, err := c.Read(id); err != nil || string(got) != "v" {
		t.Fatalf("the key after the take-over: %q, %v", got, err)
	}
	if s := readyz(t, nu); s != http.StatusOK {
		t.Errorf("the new daemon's /readyz: %d", s)
	}
	if s := readyz(t, old); s != http.StatusServiceUnavailable {
		t.Errorf("the old daemon's /readyz after the hand-over: %d", s)
	}
	select {
	case err := <-old.done:
		old.done <- err
		t.Fatalf("the old daemon exited after the hand-over (%v):\n%s", err, old.stderrText())
	case <-time.After(200 * time.Millisecond):
	}
	old.cmd.Process.Signal(syscall.SIGTERM)
	if code := old.wait(t); code != 0 {
		t.Fatalf("the old daemon exited %d on SIGTERM\n%s", code, old.stderrText())
	}
	if got, err := c.Read(id); err != nil || string(got) != "v" {
		t.Fatalf("the key once the old daemon is gone: %q, %v", got, err)
	}
	nu.cmd.Process.Signal(syscall.SIGTERM)
	if code := nu.wait(t); code != 0 {
		t.Fatalf("the new daemon exited %d\n%s", code, nu.stderrText())
	}
}

// -after-handover exit (the default) keeps what -takeover did before:
// the old daemon exits 0 once the new one serves, which -takeover=true
// still means.
func TestAfterHandoverExit(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "ukeyd.sock")
	old := startChild(t, socket)
	nu := startChild(t, socket, childOpts{args: []string{"-takeover=true"}})
	if code := old.wait(t); code != 0 {
		t.Fatalf("the old daemon exited %d\n%s", code, old.stderrText())
	}
	if pid := daemonPID(t, socket); pid != nu.cmd.Process.Pid {
		t.Fatalf("pid %d answers, not the new daemon's %d", pid, nu.cmd.Process.Pid)
	}
}

// Two DaemonSet pods' daemons start at once on a node where none
// serves (after the node's reboot, or maxSurge's new pod while the old
// one still starts), each with -takeover auto: one starts afresh and
// the other takes over from it once it serves. Both starting afresh
// left two daemons, the second having removed the first's socket as a
// stale one (server.Listen) while the first was between its bind and
// its listen, or failing on it: the first then served a socket no path
// reached, its containers lost to the node at the next upgrade. A race,
// so run many times.
func TestTwoStartAtOnce(t *testing.T) {
	rounds := 12
	if testing.Short() {
		rounds = 3
	}
	for round := range rounds {
		dir := t.TempDir()
		socket := filepath.Join(dir, "ukeyd.sock")
		pod := childOpts{args: []string{"-takeover=auto", "-after-handover", "wait", "-seccomp-agent", filepath.Join(dir, "agent.sock")}}
		d := []*child{spawnChild(t, socket, pod), spawnChild(t, socket, pod)}
		var fresh, taker *child
		testutil.Eventually(t, "one daemon to serve and the other to wait, handed over", func() bool {
			for _, c := range d {
				select {
				case err := <-c.done:
					c.done <- err
					t.Fatalf("round %d: a daemon exited: %v\n%s\nthe other's log:\n%s", round, err, c.stderrText(), other(d, c).stderrText())
				default:
				}
			}
			for _, c := range d {
				if strings.Contains(c.stderrText(), "waiting for SIGTERM") && strings.Contains(other(d, c).stderrText(), "took over") {
					fresh, taker = c, other(d, c)
					return true
				}
			}
			time.Sleep(10 * time.Millisecond)
			return false
		})
		if strings.Count(d[0].stderrText()+d[1].stderrText(), "daemon_serving=false") != 1 {
			t.Fatalf("round %d: both daemons started afresh:\n%s\n%s", round, d[0].stderrText(), d[1].stderrText())
		}
		if pid := daemonPID(t, socket); pid != taker.cmd.Process.Pid {
			t.Fatalf("round %d: pid %d answers, not the one that took over (%d)", round, pid, taker.cmd.Process.Pid)
		}
		if s := readyz(t, taker); s != http.StatusOK {
			t.Errorf("round %d: the serving daemon's /readyz: %d", round, s)
		}
		if s := readyz(t, fresh); s != http.StatusServiceUnavailable {
			t.Errorf("round %d: the handed-over daemon's /readyz: %d", round, s)
		}
		for _, c := range d {
			c.cmd.Process.Signal(syscall.SIGTERM)
			if code := c.wait(t); code != 0 {
				t.Fatalf("round %d: a daemon exited %d on SIGTERM\n%s", round, code, c.stderrText())
			}
		}
	}
}

// other is the daemon of d that is not c.
func other(d []*child, c *child) *child {
	if d[0] == c {
		return d[1]
	}
	return d[0]
}
