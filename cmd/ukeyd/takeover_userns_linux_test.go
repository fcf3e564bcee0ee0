package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ukeys/ukeys/internal/testutil"
)

// usernsUID is the test user whose daemon a process of its own, in a user
// namespace, tries to take over.
const usernsUID = 1033

// usernsAttr runs a child as uid usernsUID.
func usernsAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: usernsUID, Gid: usernsUID}}
}

// usernsSetUp returns this test's binary, unshare, and a directory of
// uid usernsUID for its daemon's sockets, or skips t where that uid
// cannot make a user namespace.
func usernsSetUp(t *testing.T) (bin, unshare, dir string) {
	t.Helper()
	bin, _ = rootDir(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	probe := exec.Command(unshare, "-U", "--map-root-user", "true")
	probe.SysProcAttr = usernsAttr()
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("uid %d cannot make a user namespace here (unshare -U): %v %s", usernsUID, err, out)
	}
	if dir, err = os.MkdirTemp(filepath.Dir(bin), "userns"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, usernsUID, usernsUID); err != nil {
		t.Fatal(err)
	}
	return bin, unshare, dir
}

// A user's daemon is taken over only from its own user namespace. A
// process of the same uid inside `unshare -U` can read no key it does
// not possess and cannot ptrace the daemon (which is not dumpable), but
// SO_PEERCRED shows it as the daemon's uid: before, it was handed every
// key, and the new daemon (root in its namespace) took itself for the
// host's. Now the old daemon refuses it, and keeps serving its keys.
func TestTakeoverFromAnotherUserNamespaceRefused(t *testing.T) {
	bin, unshare, dir := usernsSetUp(t)
	attr := usernsAttr
	socket := filepath.Join(dir, "ukeyd.sock")
	// asUser runs this test binary as a client of uid usernsUID.
	asUser := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{usernsClientArg}, args...)...)
		cmd.Env = []string{"UKEYS_SOCKET=" + socket}
		cmd.SysProcAttr = attr()
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}

	args := []string{childArg, "-socket", socket, "-request-key", "", "-log-level", "debug"}
	old := exec.Command(bin, args...)
	old.SysProcAttr = attr()
	oldLog := &testutil.Buffer{}
	old.Stderr = oldLog
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- old.Wait() }()
	t.Cleanup(func() {
		old.Process.Kill()
		<-done
	})
	testutil.Eventually(t, "the user's daemon to serve", func() bool {
		_, err := asUser("pid")
		return err == nil
	})
	oldPID, _ := asUser("pid")
	id, err := asUser("add")
	if err != nil {
		t.Fatalf("add: %v %s", err, id)
	}

	taker := exec.Command(unshare, append([]string{"-U", "--map-root-user", bin}, append(args, "-takeover")...)...)
	taker.SysProcAttr = attr()
	taker.Env = []string{"PATH=/usr/bin:/bin"}
	takerLog := &testutil.Buffer{}
	taker.Stdout, taker.Stderr = takerLog, takerLog
	if err := taker.Start(); err != nil {
		t.Fatal(err)
	}
	takerDone := make(chan error, 1)
	go func() { takerDone <- taker.Wait() }()
	select {
	case err = <-takerDone:
	case err = <-done:
		// The old daemon handed over and exited: the taker serves.
		done <- err
		taker.Process.Kill()
		<-takerDone
		t.Fatalf("a process of uid %d in a user namespace of its own took the daemon over (the old one exited: %v):\n%s", usernsUID, err, takerLog)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(takerLog.String(), "another user namespace") {
		t.Errorf("a process of uid %d in a user namespace of its own ran ukeyd -takeover: %v, want it refused (another user namespace)\n%s", usernsUID, err, takerLog)
	}
	// The old daemon serves on, with the secret.
	select {
	case err := <-done:
		done <- err
		t.Fatalf("the old daemon exited: %v\n%s", err, oldLog)
	default:
	}
	if pid, err := asUser("pid"); err != nil || pid != oldPID {
		t.Fatalf("the daemon at the socket is pid %q (%v), not the old daemon's %s", pid, err, oldPID)
	}
	if b, err := asUser("read", id); err != nil || b != "uid-1033-secret" {
		t.Fatalf("the old daemon's secret after the attempt: %q %v", b, err)
	}
	if !strings.Contains(oldLog.String(), "refusing a hand-over to a process in another user namespace") {
		t.Errorf("the old daemon did not say why it refused:\n%s", oldLog)
	}

	// The user's own ukeyd -takeover, in the daemon's namespace, still
	// takes over: not dumpable before and after, it is while it asks,
	// so that the old daemon (without CAP_SYS_PTRACE) sees its namespace.
	next := exec.Command(bin, append(args, "-takeover")...)
	next.SysProcAttr = attr()
	nextLog := &testutil.Buffer{}
	next.Stderr = nextLog
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	nextDone := make(chan error, 1)
	go func() { nextDone <- next.Wait() }()
	t.Cleanup(func() {
		next.Process.Kill()
		<-nextDone
	})
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("the old daemon, handing over to its user's own ukeyd -takeover: %v\n%s", err, oldLog)
		}
	case err := <-nextDone:
		nextDone <- err
		t.Fatalf("the user's own ukeyd -takeover: %v\n%s\nthe old daemon:\n%s", err, nextLog, oldLog)
	}
	if pid, err := asUser("pid"); err != nil || pid != strconv.Itoa(next.Process.Pid) {
		t.Fatalf("the daemon at the socket is pid %q (%v), not the new daemon's %d", pid, err, next.Process.Pid)
	}
	if b, err := asUser("read", id); err != nil || b != "uid-1033-secret" {
		t.Fatalf("the secret after the user's own hand-over: %q %v", b, err)
	}
}

// A user's daemon lists its seccomp agent's key namespaces (the
// containers' ids) in its status to the user's own processes, and not
// to a process of the same uid in a user namespace of its own (a
// rootless container's root), which a hand-over refuses too.
func TestStatusNamespacesNotForAnotherUserNamespace(t *testing.T) {
	bin, unshare, dir := usernsSetUp(t)
	attr := usernsAttr
	socket := filepath.Join(dir, "ukeyd.sock")
	d := exec.Command(bin, childArg, "-socket", socket, "-request-key", "", "-seccomp-agent", filepath.Join(dir, "agent.sock"))
	d.SysProcAttr = attr()
	log := &testutil.Buffer{}
	d.Stderr = log
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Wait() }()
	t.Cleanup(func() {
		d.Process.Kill()
		<-done
	})
	// ask runs this test binary as a client of uid usernsUID, through
	// unshare -U if inNS.
	ask := func(inNS bool) (string, error) {
		args := []string{bin, usernsClientArg, "namespaces"}
		if inNS {
			args = append([]string{unshare, "-U", "--map-root-user"}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = []string{"UKEYS_SOCKET=" + socket, "PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = attr()
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	testutil.Eventually(t, "the user's daemon to serve", func() bool {
		_, err := ask(false)
		return err == nil
	})
	if got, err := ask(false); err != nil || got != "listed" {
		t.Fatalf("the user's own process: %q %v, want listed\n%s", got, err, log)
	}
	if got, err := ask(true); err != nil || got != "not listed" {
		t.Fatalf("a process of the same uid in a user namespace of its own: %q %v, want not listed\n%s", got, err, log)
	}
}
