package server_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
)

func init() { testChildren["uffd-stall"] = uffdStallChild }

// The userfaultfd ioctls (linux/userfaultfd.h).
const (
	uffdioAPI      = 0xc018aa3f
	uffdioRegister = 0xc020aa00
)

// uffdStallChild makes, under the filter, an add_key whose payload lies
// in a page whose faults are its own to answer (userfaultfd), and never
// answers: the listener's read of the payload waits as long as it lives.
func uffdStallChild() {
	runtime.LockOSThread()
	uffd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0)
	if e != 0 {
		fmt.Println("userfaultfd:", e)
		os.Exit(1)
	}
	api := [3]uint64{0xaa, 0, 0}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uffd, uffdioAPI, uintptr(unsafe.Pointer(&api))); e != 0 {
		fmt.Println("userfaultfd:", e)
		os.Exit(1)
	}
	page, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		fmt.Println("mmap:", err)
		os.Exit(1)
	}
	reg := [4]uint64{uint64(uintptr(unsafe.Pointer(&page[0]))), 4096, 1 /* UFFDIO_REGISTER_MODE_MISSING */, 0}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uffd, uffdioRegister, uintptr(unsafe.Pointer(&reg))); e != 0 {
		fmt.Println("userfaultfd:", e)
		os.Exit(1)
	}
	fd, err := intercept.Install()
	if err != nil {
		fmt.Println("install:", err)
		os.Exit(1)
	}
	intercept.SendListener(3, fd)
	unix.Close(fd)
	var w [1]byte
	unix.Read(3, w[:])
	cstr := func(s string) uintptr { b := append([]byte(s), 0); return uintptr(unsafe.Pointer(&b[0])) }
	unix.Syscall6(unix.SYS_ADD_KEY, cstr("user"), cstr("stall"), uintptr(unsafe.Pointer(&page[0])), 16, uintptr(0xfffffffd), 0)
	fmt.Println("the call returned")
}

// stuckInUserfault reports whether a thread of this process waits in a
// userfaultfd fault (the listener's read of the caller's page).
func stuckInUserfault() bool {
	tasks, _ := filepath.Glob("/proc/self/task/*/wchan")
	for _, w := range tasks {
		if b, err := os.ReadFile(w); err == nil && strings.Contains(string(b), "userfault") {
			return true
		}
	}
	return false
}

// startStuck starts uffdStallChild under the filter, has srv serve its
// listener, and returns once the listener waits in the caller's page,
// with the listener's Serve's end and a function that kills the caller
// (which ends the read).
func startStuck(t *testing.T, srv *server.Server) (served chan error, kill func()) {
	t.Helper()
	ukeystest.NeedRoot(t, "for userfaultfd (vm.unprivileged_userfaultfd)")
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	t.Cleanup(func() { ours.Close() })
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "UKEYS_TEST_CHILD=uffd-stall")
	cmd.ExtraFiles = []*os.File{theirs}
	out := new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill = func() {
		// Its userfaultfd goes with it, which ends the listener's read.
		cmd.Process.Kill()
		cmd.Wait()
	}
	t.Cleanup(kill)
	theirs.Close()
	fd, err := intercept.ReceiveListener(fds[0])
	if err != nil {
		cmd.Wait()
		if strings.HasPrefix(out.String(), "install:") || strings.HasPrefix(out.String(), "userfaultfd:") {
			t.Skipf("no seccomp user notification or userfaultfd here: %s", out)
		}
		t.Fatalf("no listener: %v\n%s", err, out)
	}
	served = make(chan error, 1)
	go func() { served <- srv.ServeListener(fd) }()
	ours.Write([]byte{1})
	for deadline := time.Now().Add(20 * time.Second); !stuckInUserfault(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the listener never reached the caller's page:\n%s", out)
		}
	}
	return served, kill
}

// A caller can hold its listener in a call for as long as it likes: its
// payload in memory whose page fault it answers itself (userfaultfd here,
// FUSE for a user without privilege where /dev/fuse is open to all) makes
// the listener's read of it wait. The daemon's Shutdown then gives up on
// that listener when its context ends, as it does on connections; before,
// it waited for the listener, that is forever, and a daemon asked to stop
// never did.
func TestShutdownDoesNotWaitForAStuckListener(t *testing.T) {
	d := ukeystest.NewDaemon(t)
	served, kill := startStuck(t, d.Server)
	shutdownEndsAtDeadline(t, d.Server, 500*time.Millisecond, "a listener its caller holds")
	kill()
	select {
	case <-served:
	case <-time.After(time.Minute):
		t.Fatal("the listener did not end once its caller was gone")
	}
}

// Nor does a hand-over wait for such a listener past its deadline: the
// next daemon takes every key and connection, and the stuck listener is
// left behind (its caller's calls fail once the old daemon is gone).
// Before, Detach waited for it, and the hand-over with it, forever.
func TestHandOverDoesNotWaitForAStuckListener(t *testing.T) {
	defer func(d time.Duration) { server.HandoverTimeout = d }(server.HandoverTimeout)
	server.HandoverTimeout = time.Second
	path := filepath.Join(t.TempDir(), "ukeyd.sock")
	oldSvc, oldSrv, oldServed := oldDaemon(t, path)
	setup, err := client.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup.AddKey("user", "kept", []byte("v"), keys.UserKeyring); err != nil {
		t.Fatal(err)
	}
	setup.Close()
	served, kill := startStuck(t, oldSrv)
	took := make(chan error, 1)
	var res *server.TakeoverResult
	go func() {
		var err error
		res, err = server.TakeOver(path, nil, server.Config{Logger: quiet})
		took <- err
	}()
	select {
	case err := <-took:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the hand-over waits for a listener its caller holds")
	}
	<-oldServed
	kill()
	select {
	case <-served:
	case <-time.After(time.Minute):
		t.Fatal("the old daemon's listener did not end once its caller was gone")
	}
	newServed := make(chan error, 1)
	go func() { newServed <- res.Server.Serve(res.Listeners[0]) }()
	c, err := client.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Search(keys.UserKeyring, "user", "kept", 0); err != nil {
		t.Errorf("the key after the hand-over: %v", err)
	}
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res.Server.Shutdown(ctx)
	<-newServed
	res.Service.Close()
	oldSvc.WaitGC(ctx)
	oldSvc.Close()
}
