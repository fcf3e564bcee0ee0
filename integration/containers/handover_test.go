package containers

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
)

// A node's daemon is upgraded under running containers with no failed
// call: a container reads and searches its key in a loop as fast as it
// can while the daemon is taken over (ukeyd -takeover) and then
// restarted through systemd's file-descriptor store (-fdstore-state,
// with the store and the notification socket played here as systemd
// plays them); it counts its calls and their failures, which must be
// none. Another container's key is still its own afterwards, and still
// apart from the first's; a container started after both upgrades goes
// through the agent's socket, handed over with the containers. A pod
// (its sandbox and a container in its IPC and network namespaces, as a
// CRI runtime runs them) goes as one key namespace: its container finds
// the sandbox's key after both upgrades, so does a container that joins
// the pod then, and one naming the pod's sandbox from namespaces of its
// own is refused.
func TestRuncContainersAcrossUpgrades(t *testing.T) {
	runc, gobin := runcAndGo(t)
	dir := t.TempDir()
	agentSock, u := startRuncUpgrade(t, dir)

	configure, _ := runcBundle(t, runc, gobin, dir)
	root := filepath.Join(dir, "runc")
	start := func(name string) (*exec.Cmd, *testutil.Buffer) {
		return startContainer(t, runc, root, filepath.Join(dir, "bundle"), name)
	}
	// UKEYS_HANDOVER_CONTAINERS more containers, each with a key, are
	// handed over beside them: to measure a hand-over with many.
	extra, _ := strconv.Atoi(os.Getenv("UKEYS_HANDOVER_CONTAINERS"))
	for i := range extra {
		configure(notifyKeyCalls(agentSock), "add", fmt.Sprint("extra-", i), "3600")
		start(fmt.Sprint("extra-", i))
	}
	const loopSeconds = 20
	configure(notifyKeyCalls(agentSock), "loop", "looped-key", strconv.Itoa(loopSeconds), "other-key")
	loopStart := time.Now()
	looper, loopOut := start("loop")
	configure(notifyKeyCalls(agentSock), "add", "other-key", strconv.Itoa(loopSeconds))
	other, otherOut := start("other")
	bundle := filepath.Join(dir, "bundle")
	configure(notifyKeyCalls(agentSock), "add", "pod-key", strconv.Itoa(loopSeconds))
	inPod(t, bundle, "pod", 0)
	sandbox, sandboxOut := start("pod")
	testutil.Eventually(t, "the containers to add their keys", func() bool {
		return strings.Contains(loopOut.String(), "add ok") && strings.Contains(otherOut.String(), "add ok") &&
			strings.Contains(sandboxOut.String(), "add ok")
	})
	sandboxPid := containerPid(t, runc, root, id("pod"))
	configure(notifyKeyCalls(agentSock), "search", "pod-key", strconv.Itoa(loopSeconds))
	inPod(t, bundle, "pod", sandboxPid)
	member, memberOut := start("pod-member")
	inPod(t, bundle, "", 0)
	testutil.Eventually(t, "the pod's container to find its sandbox's key", func() bool {
		return strings.Contains(memberOut.String(), "search ok")
	})
	time.Sleep(time.Second)

	// The take-over, as ExecReload runs it.
	u.takeOver(t)
	t.Logf("take-over with %d containers: %s", 4+extra, tookLine(u.second.log.String(), "took over"))
	if !strings.Contains(u.second.log.String(), "containers taken over") {
		t.Errorf("the new daemon took no containers over:\n%s", u.second.log)
	}
	time.Sleep(time.Second)

	// systemd stops it for a restart: everything goes to the store, and
	// the next one starts with it.
	u.restartThroughStore(t)
	third := u.third
	t.Logf("freeze: %s", tookLine(u.second.log.String(), "kept in systemd's store"))
	t.Logf("thaw: %s", tookLine(third.log.String(), "back from a restart"))
	if !strings.Contains(third.log.String(), "containers taken over") {
		t.Errorf("the restarted daemon took no containers back:\n%s", third.log)
	}

	// A container joins the pod after the upgrades, and another names its
	// sandbox from namespaces of its own.
	configure(notifyKeyCalls(agentSock), "search", "pod-key")
	inPod(t, bundle, "pod", sandboxPid)
	late, _ := exec.Command(runc, "--root", root, "run", "--bundle", bundle, id("pod-late")).CombinedOutput()
	inPod(t, bundle, "pod", 0)
	forged, _ := exec.Command(runc, "--root", root, "run", "--bundle", bundle, id("pod-forged")).CombinedOutput()
	inPod(t, bundle, "", 0)
	if got := strings.TrimSpace(string(late)); got != "search ok" {
		t.Errorf("a container joining the pod after the upgrades: %q\n%s", got, third.log)
	}
	if got := strings.TrimSpace(string(forged)); got != "search function not implemented" {
		t.Errorf("a container naming the pod's sandbox from its own namespaces: %q\n%s", got, third.log)
	}

	// The loop ends, and says how it went.
	looper.Wait()
	other.Wait()
	sandbox.Wait()
	member.Wait()
	if got := strings.TrimSpace(memberOut.String()); got != "search ok\nsearch ok" {
		t.Errorf("the pod's container, its sandbox's key after the upgrades: %q", got)
	}
	if got := strings.TrimSpace(sandboxOut.String()); got != "add ok\nsearch ok" {
		t.Errorf("the pod's sandbox, its key after the upgrades: %q", got)
	}
	t.Logf("container loop, %v: %s", time.Since(loopStart).Round(time.Second), strings.TrimSpace(loopOut.String()))
	checkLoop(t, loopOut.String(), third.log.String())
	if !strings.Contains(loopOut.String(), "other required key not available") {
		t.Errorf("the looping container found another container's key: %q", loopOut)
	}
	if got := strings.TrimSpace(otherOut.String()); got != "add ok\nsearch ok" {
		t.Errorf("the other container, its key after the upgrades: %q", got)
	}

	// A container started now goes through the socket handed over, and
	// finds nothing of the others'.
	configure(notifyKeyCalls(agentSock), "search", "looped-key")
	fresh := exec.Command(runc, "--root", root, "run", "--bundle", filepath.Join(dir, "bundle"), id("fresh"))
	freshOut, _ := fresh.CombinedOutput()
	if got := strings.TrimSpace(string(freshOut)); got != "search required key not available" {
		t.Errorf("a container started after the upgrades: %q\n%s", got, third.log)
	}
	u.stop(t)
	c, err := client.Dial(filepath.Join(dir, "ukeyd.sock"))
	if err == nil {
		c.Close()
		t.Error("a daemon still serves after the last stopped")
	}
}

// tookLine returns the "took" of the daemon's log line that says what.
func tookLine(log, what string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, what) {
			if i := strings.Index(l, "took="); i >= 0 {
				return strings.Fields(l[i:])[0]
			}
			return l
		}
	}
	return "(not logged)"
}

// fakeSystemd plays systemd for the daemons a test starts: their
// notification socket (NOTIFY_SOCKET, with the file-descriptor store's
// messages) and socket activation (LISTEN_FDS, LISTEN_FDNAMES).
type fakeSystemd struct {
	c    *net.UnixConn
	path string
}

type notification struct {
	text string
	fds  []int
}

// daemonProc is a daemon the fake systemd started.
type daemonProc struct {
	cmd  *exec.Cmd
	log  *testutil.Buffer
	done chan error
}

func (d *daemonProc) wait(timeout time.Duration) error {
	select {
	case err := <-d.done:
		d.done <- err
		return err
	case <-time.After(timeout):
		return fmt.Errorf("did not exit in %v", timeout)
	}
}

func newFakeSystemd(t *testing.T) *fakeSystemd {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &fakeSystemd{c: c, path: path}
}

// next returns the next notification, from whichever daemon.
func (s *fakeSystemd) next(t *testing.T, d *daemonProc) notification {
	t.Helper()
	s.c.SetReadDeadline(time.Now().Add(60 * time.Second))
	b := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4*8))
	k, oobn, _, _, err := s.c.ReadMsgUnix(b, oob)
	if err != nil {
		t.Fatalf("no notification: %v\n%s", err, d.log)
	}
	var n notification
	n.text = string(b[:k])
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range msgs {
			if r, err := unix.ParseUnixRights(&msgs[i]); err == nil {
				n.fds = append(n.fds, r...)
			}
		}
	}
	return n
}

// start starts the daemon as systemd would: files from descriptor 3 on,
// named, LISTEN_PID its own (a shell that execs the daemon knows it).
func (s *fakeSystemd) start(t *testing.T, files []*os.File, names []string, args ...string) *daemonProc {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", `LISTEN_PID=$$ exec "$0" "$@"`, ukeyd(t)}, args...)...)
	cmd.Env = append(os.Environ(), "LISTEN_FDS="+strconv.Itoa(len(files)), "LISTEN_FDNAMES="+strings.Join(names, ":"), "NOTIFY_SOCKET="+s.path)
	cmd.ExtraFiles = files
	return s.run(t, cmd)
}

// startPlain starts the daemon with only the notification socket, as
// ExecReload's take-over runs.
func (s *fakeSystemd) startPlain(t *testing.T, args ...string) *daemonProc {
	t.Helper()
	cmd := exec.Command(ukeyd(t), args...)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+s.path)
	return s.run(t, cmd)
}

func (s *fakeSystemd) run(t *testing.T, cmd *exec.Cmd) *daemonProc {
	t.Helper()
	d := &daemonProc{cmd: cmd, log: &testutil.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = d.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		d.wait(10 * time.Second)
	})
	return d
}

// inPod makes the bundle's next container one of pod sandbox's, as
// containerd's CRI plugin annotates it: the sandbox's own (pid 0: IPC and
// network namespaces of its own), or one in the IPC and network
// namespaces of process pid; sandbox "": no pod's.
func inPod(t *testing.T, bundle, sandbox string, pid int) {
	t.Helper()
	editConfig(t, bundle, func(c map[string]any) {
		delete(c, "annotations")
		if sandbox != "" {
			typ := "sandbox"
			if pid != 0 {
				typ = "container"
			}
			c["annotations"] = map[string]any{"io.kubernetes.cri.sandbox-id": sandbox, "io.kubernetes.cri.container-type": typ}
		}
		for _, ns := range c["linux"].(map[string]any)["namespaces"].([]any) {
			ns := ns.(map[string]any)
			kind := map[string]string{"ipc": "ipc", "network": "net"}[ns["type"].(string)]
			if kind == "" {
				continue
			}
			delete(ns, "path")
			if pid != 0 {
				ns["path"] = fmt.Sprintf("/proc/%d/ns/%s", pid, kind)
			}
		}
	})
}

// containerPid returns the pid of container id's init.
func containerPid(t *testing.T, runc, root, id string) int {
	t.Helper()
	out, err := exec.Command(runc, "--root", root, "state", id).Output()
	var st struct {
		Pid int `json:"pid"`
	}
	if err == nil {
		err = json.Unmarshal(out, &st)
	}
	if err != nil || st.Pid <= 0 {
		t.Fatalf("container %s's pid: %v %s", id, err, out)
	}
	return st.Pid
}
