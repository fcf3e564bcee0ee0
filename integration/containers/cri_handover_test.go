package containers

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/testutil"
)

// Pods that containerd's CRI runs keep their keys while the node's
// ukeyd is upgraded as deploy/kubernetes/ukeyd.yaml's rolling update
// upgrades it, and then restarted through systemd's file-descriptor
// store: a container of pod a reads and searches its key in a loop as
// fast as it can throughout, and none of its calls fails. The new
// daemon (-takeover=auto -after-handover wait, started beside the old
// one as maxSurge starts the new pod) takes over and is ready; the old
// one waits unready (/readyz 503) and exits 0 on SIGTERM. After both,
// each pod still has its own keys and no other's, a container started
// in pod a joins its key namespace, a new pod gets a new one, and the
// kernel's /proc/keys and /proc/key-users are what they were. With -v
// the test logs a transcript of it all.
func TestCRIPodsAcrossUpgrades(t *testing.T) {
	var sd *fakeSystemd
	var first *daemonProc
	var listener *os.File // the first daemon's socket, in the store
	var args []string
	cri := startCRIWith(t, func() (string, string, *testutil.Buffer) {
		dir := t.TempDir()
		agent := filepath.Join(dir, "agent.sock")
		args = []string{"-socket", filepath.Join(dir, "run", "ukeyd.sock"), "-request-key", "", "-metrics", "127.0.0.1:0",
			"-seccomp-agent", agent, "-fdstore-state"}
		sd = newFakeSystemd(t)
		first = sd.startPlain(t, append(args, "-takeover=auto", "-after-handover", "wait")...)
		listener = awaitReady(t, sd, first)
		return dir, agent, first.log
	})
	tr := transcript{dir: cri.dir}
	pk0, ku0 := readFile("/proc/keys"), readFile("/proc/key-users")

	a := cri.runPod("a")
	b := cri.runPod("b")
	// The loop runs until stopped; the sidecar shares pod a's keys, the
	// keeper holds pod b's.
	loop := cri.start(a, "loop", "loop", "cri-loop", "600", "cri-b")
	sidecar := cri.start(a, "sidecar", "add", "cri-a", "600")
	keeper := cri.start(b, "keeper", "add", "cri-b", "600")
	cri.waitFor(loop, "add ok\n")
	cri.waitFor(sidecar, "add ok\n")
	cri.waitFor(keeper, "add ok\n")
	tr.add("crictl pods", cri.must("pods"))
	tr.add("crictl ps", cri.must("ps"))
	cri.showKeys(&tr, map[string]string{"loop (pod a)": loop, "sidecar (pod a)": sidecar, "keeper (pod b)": keeper})
	time.Sleep(time.Second) // the loop runs a while before the hand-over

	// The rolling update: the new pod's daemon beside the old one.
	start := time.Now()
	second := sd.startPlain(t, append(args, "-takeover=auto", "-after-handover", "wait")...)
	for _, want := range []string{"MAINPID=", "READY=1"} {
		if msg := sd.next(t, second); !strings.HasPrefix(msg.text, want) {
			t.Fatalf("the new daemon said %q, not %s\n%s", msg.text, want, second.log)
		}
	}
	ready := time.Since(start)
	testutil.Eventually(t, "the old daemon to wait, handed over", func() bool {
		return strings.Contains(first.log.String(), "waiting for SIGTERM")
	})
	newReady, oldReady := readyzOf(t, second), readyzOf(t, first)
	if newReady != http.StatusOK || oldReady != http.StatusServiceUnavailable {
		t.Errorf("/readyz after the hand-over: the new daemon's %d, the old one's %d", newReady, oldReady)
	}
	first.cmd.Process.Signal(syscall.SIGTERM)
	if err := first.wait(20 * time.Second); err != nil {
		t.Errorf("the old daemon on SIGTERM: %v\n%s", err, first.log)
	}
	tr.add("ukeyd -takeover=auto -after-handover wait (the new pod's)",
		logLines(second.log.String(), "-takeover auto", "took over", "containers taken over")+
			fmt.Sprintf("\nREADY=1 %v after its start; /readyz: new %d, old %d", ready.Round(time.Millisecond), newReady, oldReady))
	tr.add("the old pod's ukeyd, then SIGTERM", logLines(first.log.String(), "waiting for SIGTERM", "new daemon; exiting"))

	// systemd restarts it: everything to the store, and back.
	u := &upgrade{sd: sd, args: args, files: []*os.File{listener}, names: []string{"ukeyd"}, first: first, second: second}
	u.restartThroughStore(t)
	third := u.third
	tr.add("restart through systemd's fd store (SIGTERM, then ukeyd with what the store kept)",
		logLines(second.log.String(), "kept in systemd's store")+"\n"+
			logLines(third.log.String(), "back from a restart", "containers taken over")+
			fmt.Sprintf("\nREADY=1 %v after its start", u.thawed.Round(time.Millisecond)))
	if !strings.Contains(third.log.String(), "containers taken over") {
		t.Errorf("the restarted daemon took no containers back:\n%s", third.log)
	}
	time.Sleep(500 * time.Millisecond) // the loop runs a while after

	// Each pod's keys, its own; a container joining pod a shares them,
	// one of pod b or of a new pod c does not.
	shown := cri.showKeys(&tr, map[string]string{"loop (pod a)": loop, "keeper (pod b)": keeper})
	if !strings.Contains(shown["loop (pod a)"], "user: cri-a") || strings.Contains(shown["loop (pod a)"], "cri-b") ||
		!strings.Contains(shown["keeper (pod b)"], "user: cri-b") || strings.Contains(shown["keeper (pod b)"], "cri-a") {
		t.Errorf("the pods' keys after the upgrades:\n%s", tr.String())
	}
	c := cri.runPod("c")
	for _, s := range []struct {
		pod        criPod
		name, want string
	}{
		{a, "late", "search ok"},
		{b, "other", "search required key not available"},
		{c, "new", "search required key not available"},
	} {
		got := strings.TrimSpace(cri.wait(cri.start(s.pod, s.name, "search", "cri-loop")))
		if got != s.want {
			t.Errorf("container %s, started after the upgrades, searching pod a's key: %q", s.name, got)
		}
		tr.add(fmt.Sprintf("container %s (pod %s) started after them: keyprog search cri-loop", s.name, s.pod.id[:13]), got)
	}

	cri.must("stop", "--timeout", "10", loop)
	out := cri.wait(loop)
	checkLoop(t, out, third.log.String())
	if !strings.Contains(out, "other required key not available") {
		t.Errorf("the looping container found pod b's key: %q", out)
	}
	tr.add("the loop (pod a), stopped", strings.TrimSpace(out))
	tr.add("crictl ps -a", cri.must("ps", "-a"))

	pk1, ku1 := readFile("/proc/keys"), readFile("/proc/key-users")
	if strings.Contains(pk1, " cri-") || len(sessionKeyrings(a.id, b.id, c.id, loop, sidecar, keeper)) > 0 {
		t.Errorf("the kernel holds a key or keyring of the pods':\n%s", pk1)
	}
	tr.add("host /proc/keys before", strings.TrimSpace(pk0))
	tr.add("host /proc/key-users before", strings.TrimSpace(ku0))
	tr.add("host /proc/keys after", sameOr(pk0, pk1))
	tr.add("host /proc/key-users after", sameOr(ku0, ku1))
	t.Logf("transcript:\n%s", tr.String())
}

// awaitReady reads d's notifications up to READY=1 and returns the
// listening socket it kept in the store.
func awaitReady(t *testing.T, sd *fakeSystemd, d *daemonProc) *os.File {
	t.Helper()
	var ln *os.File
	for {
		msg := sd.next(t, d)
		switch {
		case msg.text == "READY=1":
			if ln == nil {
				t.Fatalf("the daemon kept no socket in the store\n%s", d.log)
			}
			return ln
		case msg.text == "FDSTORE=1\nFDNAME=ukeyd" && len(msg.fds) == 1:
			ln = os.NewFile(uintptr(msg.fds[0]), "ukeyd")
			t.Cleanup(func() { ln.Close() })
		default:
			t.Fatalf("the daemon said %q\n%s", msg.text, d.log)
		}
	}
}

// readyzOf returns the status of daemon d's /readyz.
func readyzOf(t *testing.T, d *daemonProc) int {
	t.Helper()
	m := regexp.MustCompile(`msg="ukeyd: metrics" addr=(\S+)`).FindStringSubmatch(d.log.String())
	if m == nil {
		t.Fatalf("the daemon says no metrics address\n%s", d.log)
	}
	resp, err := http.Get("http://" + m[1] + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// showKeys runs keyprog show in each running container (crictl exec)
// and adds what it printed to tr; it returns that by container.
func (r *criRig) showKeys(tr *transcript, ids map[string]string) map[string]string {
	r.t.Helper()
	shown := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(ids)) {
		shown[name] = r.must("exec", ids[name], "/keyprog", "show")
		tr.add(fmt.Sprintf("crictl exec %s /keyprog show   # %s", ids[name][:13], name), shown[name])
	}
	return shown
}

// transcript is what the test shows with -v: each step and its output.
// The test's directory, in the daemons' log lines, is $DIR.
type transcript struct {
	strings.Builder
	dir string
}

func (tr *transcript) add(step, out string) {
	fmt.Fprintf(tr, "$ %s\n", step)
	if out != "" {
		fmt.Fprintf(tr, "%s\n", strings.ReplaceAll(out, tr.dir, "$DIR"))
	}
}

// logLines returns the lines of a daemon's log that hold one of words,
// without their time.
func logLines(log string, words ...string) string {
	var ls []string
	for _, l := range strings.Split(log, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				if i := strings.Index(l, "level="); i > 0 {
					l = l[i:]
				}
				ls = append(ls, l)
				break
			}
		}
	}
	return strings.Join(ls, "\n")
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// sameOr says "unchanged" if after is before, and otherwise the lines
// each has that the other has not.
func sameOr(before, after string) string {
	if before == after {
		return "(unchanged)"
	}
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	b, a := in(before), in(after)
	var d []string
	for _, l := range strings.Split(before, "\n") {
		if !a[l] {
			d = append(d, "- "+l)
		}
	}
	for _, l := range strings.Split(after, "\n") {
		if !b[l] {
			d = append(d, "+ "+l)
		}
	}
	return strings.Join(d, "\n")
}
