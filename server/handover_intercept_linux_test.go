package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/server"
)

func init() {
	testChildren["handover-calls"] = handoverCallsChild
	if os.Getenv("UKEYS_TEST_CHILD") == "handover-calls" {
		runtime.LockOSThread() // one thread: its @t is the same before and after
	}
}

// handoverCallsChild makes @t and @p and a key in @s through its own
// system calls, under the filter; then, once told (a line on standard
// input), finds them again and reads the key.
func handoverCallsChild() {
	startIntercepted(false)
	get := func(id int, create uintptr) int32 {
		r, _, _ := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(uint32(int32(id))), create)
		return int32(r)
	}
	desc, payload := []byte("k\x00"), []byte("kept")
	typ := []byte("user\x00")
	k, _, e := unix.Syscall6(unix.SYS_ADD_KEY, uintptr(unsafePtr(typ)), uintptr(unsafePtr(desc)), uintptr(unsafePtr(payload)), uintptr(len(payload)), uintptr(uint32(0xfffffffd)), 0)
	fmt.Printf("before %d %d %d %v\n", get(-1, 1), get(-2, 1), int32(k), e)
	bufio.NewReader(os.Stdin).ReadString('\n')
	buf := make([]byte, 16)
	n, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_READ, k, uintptr(unsafePtr(buf)), uintptr(len(buf)), 0, 0)
	fmt.Printf("after %d %d %q %v\n", get(-1, 0), get(-2, 0), buf[:min(int(n), len(buf))], e)
}

// A program under ukeyctl run keeps being served across a hand-over: the
// seccomp listener goes to the new daemon between two calls, and the
// program's thread and process keyrings and its keys are there after.
func TestHandOverSeccompListener(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ukeyd.sock")
	oldSvc, oldSrv, oldServed := oldDaemon(t, path)
	c := startChild(t, "handover-calls")
	defer c.cmd.Wait()
	served := make(chan error, 1)
	go func() { served <- oldSrv.ServeListener(c.listener) }()
	c.begin()
	lines, in := c.lines, c.in
	lines.Scan()
	var t1, p1, k1 int32
	var e1 string
	if _, err := fmt.Sscanf(lines.Text(), "before %d %d %d %s", &t1, &p1, &k1, &e1); err != nil || t1 <= 0 || p1 <= 0 || k1 <= 0 {
		t.Fatalf("before the hand-over: %q", lines.Text())
	}

	res, err := server.TakeOver(path, nil, server.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	<-served
	newServed := make(chan error, 1)
	go func() { newServed <- res.Server.Serve(res.Listeners[0]) }()
	fmt.Fprintln(in)
	lines.Scan()
	if want := fmt.Sprintf(`after %d %d "kept" errno 0`, t1, p1); lines.Text() != want {
		t.Fatalf("after the hand-over: %q, want %q", lines.Text(), want)
	}
	in.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res.Server.Shutdown(ctx)
	<-newServed
	<-oldServed
	res.Service.Close()
	oldSvc.WaitGC(ctx)
	oldSvc.Close()
}

func unsafePtr(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

// child is a test child started under the filter with its standard
// input and output held, for a test that serves its listener itself.
type child struct {
	cmd      *exec.Cmd
	listener int
	ours     *os.File
	lines    *bufio.Scanner // its standard output
	in       io.WriteCloser // its standard input
}

// startChild starts the test binary as child role and receives the
// listener it hands over (startIntercepted); it skips the test where
// there is no interception. The child waits for begin.
func startChild(t *testing.T, role string) *child {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	t.Cleanup(func() { ours.Close() })
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "UKEYS_TEST_CHILD="+role)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	out, _ := cmd.StdoutPipe()
	in, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	listener, err := intercept.ReceiveListener(fds[0])
	if err != nil {
		in.Close()
		cmd.Wait()
		t.Skipf("no interception here: %v", err)
	}
	return &child{cmd: cmd, listener: listener, ours: ours, lines: bufio.NewScanner(out), in: in}
}

// begin lets the child make its first call.
func (c *child) begin() { c.ours.Write([]byte{1}) }
