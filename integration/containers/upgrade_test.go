package containers

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/ukeystest"
)

// runcAndGo returns the paths of runc and of the go command (which
// builds the containers' program), or skips the test where either, or
// root, is missing.
func runcAndGo(t *testing.T) (runc, gobin string) {
	t.Helper()
	ukeystest.NeedRoot(t, "runc runs containers as root")
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("needs runc (Debian package runc)")
	}
	gobin, err = exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command to build the container's program")
	}
	return runc, gobin
}

// activationSocket listens at path, as systemd's ukeyd.socket does, and
// returns the file a daemon started through it is given.
func activationSocket(t *testing.T, path string) *os.File {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	lf, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lf.Close() })
	return lf
}

// editConfig rewrites the bundle's config.json as edit changes it.
func editConfig(t *testing.T, bundle string, edit func(c map[string]any)) {
	t.Helper()
	p := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	edit(c)
	if b, err = json.Marshal(c); err == nil {
		err = os.WriteFile(p, b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// startContainer starts the bundle's container name with runc run (and
// flags), killed at the end, and waits until it runs; it returns the
// command and what the container writes.
func startContainer(t *testing.T, runc, root, bundle, name string, flags ...string) (*exec.Cmd, *testutil.Buffer) {
	t.Helper()
	args := append(append([]string{"--root", root, "run"}, flags...), "--bundle", bundle, id(name))
	cmd := exec.Command(runc, args...)
	out := &testutil.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command(runc, "--root", root, "kill", id(name), "KILL").Run()
		cmd.Wait()
	})
	waitForContainer(t, runc, root, id(name))
	return cmd, out
}

// upgrade is a node's daemon upgraded as systemd upgrades it: first
// runs; second takes over from it (ExecReload's ukeyd -takeover); third
// is second restarted through systemd's file-descriptor store.
type upgrade struct {
	sd   *fakeSystemd
	args []string
	// files and names are what systemd gives each daemon it starts: its
	// sockets, and then what its store keeps.
	files                []*os.File
	names                []string
	first, second, third *daemonProc
	// thawed is how long third took from its start to READY=1.
	thawed time.Duration
}

// startUpgrade starts the first daemon, with args and the sockets files
// named names, and waits until it is ready.
func startUpgrade(t *testing.T, files []*os.File, names []string, args ...string) *upgrade {
	t.Helper()
	u := &upgrade{sd: newFakeSystemd(t), args: args, files: files, names: names}
	u.first = u.sd.start(t, files, names, args...)
	if msg := u.sd.next(t, u.first); msg.text != "READY=1" {
		t.Fatalf("first notification %q\n%s", msg.text, u.first.log)
	}
	return u
}

// startRuncUpgrade starts the first daemon of an upgrade in dir, with
// its socket through socket activation, the seccomp agent's socket (it
// returns its path) for runc's containers, the file-descriptor store's
// state, and extra arguments.
func startRuncUpgrade(t *testing.T, dir string, extra ...string) (agentSock string, u *upgrade) {
	t.Helper()
	agentSock = filepath.Join(dir, "agent.sock")
	socket := filepath.Join(dir, "ukeyd.sock")
	args := append([]string{"-socket", socket, "-request-key", "", "-seccomp-agent", agentSock, "-fdstore-state", "-log-level", "debug"}, extra...)
	return agentSock, startUpgrade(t, []*os.File{activationSocket(t, socket)}, []string{"ukeyd.socket"}, args...)
}

// takeOver starts second with -takeover, as ExecReload runs it, and
// waits until it is ready and first has exited.
func (u *upgrade) takeOver(t *testing.T) {
	t.Helper()
	u.second = u.sd.startPlain(t, append([]string{"-takeover"}, u.args...)...)
	if msg := u.sd.next(t, u.second); !strings.HasPrefix(msg.text, "MAINPID=") {
		t.Fatalf("the new daemon's first notification %q\n%s", msg.text, u.second.log)
	}
	if msg := u.sd.next(t, u.second); msg.text != "READY=1" {
		t.Fatalf("the new daemon's second notification %q\n%s", msg.text, u.second.log)
	}
	if err := u.first.wait(20 * time.Second); err != nil {
		t.Fatalf("the old daemon: %v\n%s", err, u.first.log)
	}
}

// restartThroughStore stops second as systemd stops it for a restart,
// everything going to the store, and starts third with what the store
// kept, until it is ready.
func (u *upgrade) restartThroughStore(t *testing.T) {
	t.Helper()
	u.second.cmd.Process.Signal(syscall.SIGTERM)
	files, names := u.files, u.names
	for {
		msg := u.sd.next(t, u.second)
		if msg.text == "STOPPING=1" {
			break
		}
		name, ok := strings.CutPrefix(msg.text, "FDSTORE=1\nFDNAME=")
		if !ok || len(msg.fds) != 1 {
			t.Fatalf("a notification %q with %d descriptors\n%s", msg.text, len(msg.fds), u.second.log)
		}
		f := os.NewFile(uintptr(msg.fds[0]), name)
		t.Cleanup(func() { f.Close() })
		files, names = append(files, f), append(names, name)
	}
	if err := u.second.wait(20 * time.Second); err != nil {
		t.Fatalf("the stopped daemon: %v\n%s", err, u.second.log)
	}
	start := time.Now()
	u.third = u.sd.start(t, files, names, u.args...)
	for {
		msg := u.sd.next(t, u.third)
		if msg.text == "READY=1" {
			break
		}
		if !strings.HasPrefix(msg.text, "FDSTOREREMOVE=1\n") {
			t.Fatalf("the restarted daemon said %q\n%s", msg.text, u.third.log)
		}
	}
	u.thawed = time.Since(start)
}

// stop stops third with SIGINT, and waits until it has exited.
func (u *upgrade) stop(t *testing.T) {
	t.Helper()
	u.third.cmd.Process.Signal(syscall.SIGINT)
	if err := u.third.wait(20 * time.Second); err != nil {
		t.Errorf("the last daemon: %v\n%s", err, u.third.log)
	}
}

// checkLoop checks the counts a container's keyprog loop printed: a
// thousand calls at least, and none failed.
func checkLoop(t *testing.T, out, log string) {
	t.Helper()
	m := regexp.MustCompile(`loop calls (\d+) failures (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the looping container said %q\n%s", out, log)
	}
	if calls, _ := strconv.Atoi(m[1]); calls < 1000 || m[2] != "0" {
		t.Errorf("the looping container made %s calls, %s failed:\n%s", m[1], m[2], out)
	}
}
