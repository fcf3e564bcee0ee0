package containers

import (
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

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/ukeystest"
)

// The /proc files go with the daemon's upgrades: two runc containers
// whose /proc/keys and /proc/sys/kernel/keys are binds of ukeyd's files
// (-proc-dir) read them in a loop as fast as they can while the daemon
// is taken over (ukeyd -takeover) and then restarted through systemd's
// file-descriptor store, and no read fails (a bind of a mount whose
// FUSE connection died reads ENOTCONN): the new daemons serve the same
// connection. After each switch each container adds a key, and sees it
// in its /proc/keys, and never the other's.
func TestRuncProcFilesAcrossUpgrades(t *testing.T) {
	ukeystest.NeedRoot(t, "runc runs containers as root")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse, which the /proc files are served through")
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("needs runc (Debian package runc)")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command to build the container's program")
	}
	dir := t.TempDir()
	procDir := filepath.Join(dir, "proc")
	if err := os.Mkdir(procDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The daemons are killed if the test fails, not stopped.
	t.Cleanup(func() { unix.Unmount(procDir, unix.MNT_DETACH) })
	agentSock := filepath.Join(dir, "agent.sock")
	socket := filepath.Join(dir, "ukeyd.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lf, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	sd := newFakeSystemd(t)
	args := []string{"-socket", socket, "-request-key", "", "-seccomp-agent", agentSock, "-proc-dir", procDir,
		"-fdstore-state", "-log-level", "debug"}
	first := sd.start(t, []*os.File{lf}, []string{"ukeyd.socket"}, args...)
	if msg := sd.next(t, first); msg.text != "READY=1" {
		t.Fatalf("first notification %q\n%s", msg.text, first.log)
	}

	configure, _ := runcBundle(t, runc, gobin, dir)
	bundle := filepath.Join(dir, "bundle")
	rootfs := filepath.Join(bundle, "rootfs")
	root := filepath.Join(dir, "runc")
	start := func(name string, args ...string) (*exec.Cmd, *testutil.Buffer) {
		configure(notifyKeyCalls(agentSock), args...)
		bindProcFiles(t, bundle, procDir)
		cmd := exec.Command(runc, "--root", root, "run", "--no-new-keyring", "--bundle", bundle, id(name))
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
	a, aOut := start("procloop-a", "procloop", "key-of-a", "key-of-b")
	b, bOut := start("procloop-b", "procloop", "key-of-b", "key-of-a")
	// mark tells the containers a switch is done, and waits until each
	// sees the key it adds then.
	mark := func(n int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(rootfs, "switch-"+strconv.Itoa(n)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(30 * time.Second); !strings.Contains(aOut.String(), "sees key-of-a-"+strconv.Itoa(n)+"\n") ||
			!strings.Contains(bOut.String(), "sees key-of-b-"+strconv.Itoa(n)+"\n"); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				// What the containers read, said once they stop.
				os.WriteFile(filepath.Join(rootfs, "stop"), nil, 0o644)
				a.Wait()
				b.Wait()
				t.Fatalf("after switch %d the containers do not see the keys they added:\na:\n%s\nb:\n%s", n, aOut, bOut)
			}
		}
	}
	testutil.Eventually(t, "the containers to add their keys", func() bool {
		return strings.Contains(aOut.String(), "add ok") && strings.Contains(bOut.String(), "add ok")
	})
	time.Sleep(time.Second)

	// The take-over, as ExecReload runs it.
	second := sd.startPlain(t, append([]string{"-takeover"}, args...)...)
	if msg := sd.next(t, second); !strings.HasPrefix(msg.text, "MAINPID=") {
		t.Fatalf("the new daemon's first notification %q\n%s", msg.text, second.log)
	}
	if msg := sd.next(t, second); msg.text != "READY=1" {
		t.Fatalf("the new daemon's second notification %q\n%s", msg.text, second.log)
	}
	if err := first.wait(20 * time.Second); err != nil {
		t.Fatalf("the old daemon: %v\n%s", err, first.log)
	}
	t.Logf("take-over: %s", tookLine(second.log.String(), "took over"))
	if !strings.Contains(second.log.String(), "the /proc files of key namespaces, handed over") {
		t.Errorf("the new daemon did not serve the /proc files handed over:\n%s", second.log)
	}
	mark(1)
	time.Sleep(time.Second)

	// systemd stops it for a restart: the files' connection goes to the
	// store with the rest, and the next daemon serves it on.
	second.cmd.Process.Signal(syscall.SIGTERM)
	var files []*os.File
	var names []string
	for {
		msg := sd.next(t, second)
		if msg.text == "STOPPING=1" {
			break
		}
		name, ok := strings.CutPrefix(msg.text, "FDSTORE=1\nFDNAME=")
		if !ok || len(msg.fds) != 1 {
			t.Fatalf("a notification %q with %d descriptors\n%s", msg.text, len(msg.fds), second.log)
		}
		f := os.NewFile(uintptr(msg.fds[0]), name)
		defer f.Close()
		files, names = append(files, f), append(names, name)
	}
	if err := second.wait(20 * time.Second); err != nil {
		t.Fatalf("the stopped daemon: %v\n%s", err, second.log)
	}
	t.Logf("freeze: %s", tookLine(second.log.String(), "kept in systemd's store"))
	third := sd.start(t, append([]*os.File{lf}, files...), append([]string{"ukeyd.socket"}, names...), args...)
	for {
		msg := sd.next(t, third)
		if msg.text == "READY=1" {
			break
		}
		if !strings.HasPrefix(msg.text, "FDSTOREREMOVE=1\n") {
			t.Fatalf("the next daemon said %q\n%s", msg.text, third.log)
		}
	}
	t.Logf("thaw: %s", tookLine(third.log.String(), "back from a restart"))
	if !strings.Contains(third.log.String(), "the /proc files of key namespaces, handed over") {
		t.Errorf("the restarted daemon did not serve the /proc files it kept:\n%s", third.log)
	}
	mark(2)
	time.Sleep(time.Second)

	if err := os.WriteFile(filepath.Join(rootfs, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a.Wait()
	b.Wait()
	phase := regexp.MustCompile(`phase (\d) reads (\d+) failures (\d+) slowest (\S+) first (.*)`)
	for name, out := range map[string]string{"a": aOut.String(), "b": bOut.String()} {
		ms := phase.FindAllStringSubmatch(out, -1)
		if len(ms) != 3 || !strings.HasSuffix(out, "procloop done\n") {
			t.Errorf("container %s said:\n%s", name, out)
			continue
		}
		for i, m := range ms {
			t.Logf("container %s, %s: %s reads, %s failed, the slowest %s", name,
				[]string{"before and across the take-over", "after it and across the restart", "after the restart"}[i], m[2], m[3], m[4])
			if reads, _ := strconv.Atoi(m[2]); reads < 100 || m[3] != "0" {
				t.Errorf("container %s's phase %s: %s reads, %s failed, the first %s", name, m[1], m[2], m[3], m[5])
			}
		}
	}
	if pv := filepath.Join(procDir, "keys"); t.Failed() {
		got, err := os.ReadFile(pv)
		t.Logf("the host's %s: %v\n%s\nthe last daemon's log:\n%s", pv, err, got, third.log)
	}
	third.cmd.Process.Signal(syscall.SIGINT)
	if err := third.wait(20 * time.Second); err != nil {
		t.Errorf("the last daemon: %v\n%s", err, third.log)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(procDir, &st); err == nil && st.Type == unix.FUSE_SUPER_MAGIC {
		t.Error("the /proc files are still mounted after the last daemon stopped")
	}
}
