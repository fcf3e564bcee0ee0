package server_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

func init() {
	testChildren["threads"] = threadsChild
	if os.Getenv("UKEYS_TEST_CHILD") == "threads" {
		// The main goroutine keeps the thread group's leader (an init
		// function's lock holds it to the main thread), so that the two
		// asking threads are both other threads: a leader's @p would be
		// its process's, which a thread met afterwards inherits.
		runtime.LockOSThread()
	}
}

// threadsChild asks for @t and @p (creating them) from two threads at
// once, under the filter on all its threads (or, with UKEYS_TEST_KERNEL,
// of the kernel), and says whether the threads' @t differ and their @p
// agree.
func threadsChild() {
	startIntercepted(true)
	get := func(id int) int32 {
		r, _, _ := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(uint32(int32(id))), 1)
		return int32(r)
	}
	var ts, ps [2]int32
	var wg sync.WaitGroup
	ready := make(chan struct{})
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // two threads, both held while they ask
			<-ready
			ts[i], ps[i] = get(-1), get(-2)
		}()
	}
	close(ready)
	wg.Wait()
	fmt.Printf("threads' @t differ: %v\nthreads' @p agree: %v\n", ts[0] != ts[1] && ts[0] > 0 && ts[1] > 0, ps[0] == ps[1] && ps[0] > 0)
}

// The threads of an intercepted program each have a thread keyring of
// their own, as with the kernel; and, as with the kernel, two threads
// that each make the process keyring make one each (the kernel installs
// it in the making thread's credentials only).
func TestInterceptedThreads(t *testing.T) {
	want := "threads' @t differ: true\nthreads' @p agree: false\n"
	if said := runIntercepted(t, "threads"); said != want {
		t.Fatalf("ukeys: %q, want %q", said, want)
	}
	if k, ok := runKernel(t, "threads"); ok && k != want {
		t.Fatalf("the kernel: %q", k)
	}
}

// runIntercepted runs the test binary as child role under the filter,
// serves its key calls with a server of its own, and returns what it
// printed. A child installs the filter, hands the listener over fd 3 and
// waits for a byte before its first call (startIntercepted).
func runIntercepted(t *testing.T, role string, env ...string) string {
	t.Helper()
	svc := keys.New()
	defer svc.Close()
	srv := server.New(svc, server.Config{})
	defer srv.Shutdown(t.Context())
	return runFiltered(t, role, srv.ServeListener, env...)
}

// runFiltered runs the test binary as child role under the filter, serves
// the listener it hands over with serve (a server's ServeListener, say)
// until the child has exited, and returns what the child printed.
func runFiltered(t *testing.T, role string, serve func(listener int) error, env ...string) string {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	defer ours.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "UKEYS_TEST_CHILD="+role), env...)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	listener, err := intercept.ReceiveListener(fds[0])
	if err != nil {
		line, _ := bufio.NewReader(out).ReadString('\n')
		cmd.Wait()
		t.Skipf("no interception here: %v %s", err, line)
	}
	done := make(chan error, 1)
	go func() { done <- serve(listener) }()
	ours.Write([]byte{1})
	said, _ := readAll(out)
	if err := cmd.Wait(); err != nil {
		t.Errorf("child %s: %v", role, err)
	}
	<-done
	return said
}

// runKernel runs the same child against the kernel's own keyrings, in a
// session of its own; ok is false where this kernel refuses them.
func runKernel(t *testing.T, role string, env ...string) (string, bool) {
	t.Helper()
	kc := exec.Command(os.Args[0], "-test.run=^$")
	kc.Env = append(append(os.Environ(), "UKEYS_TEST_CHILD="+role, "UKEYS_TEST_KERNEL=1"), env...)
	kc.Stderr = os.Stderr
	kout, err := kc.Output()
	if err != nil {
		t.Fatalf("kernel child %s: %v", role, err)
	}
	k := string(kout)
	return k, !strings.HasPrefix(k, "kernel keyrings:")
}

// startIntercepted is a child's start: under the filter (all threads
// with all), its listener handed to the parent, or with
// UKEYS_TEST_KERNEL the kernel's own keyrings; in a session of its own
// either way.
func startIntercepted(all bool) {
	if os.Getenv("UKEYS_TEST_KERNEL") == "" {
		startFiltered(all)
	}
	if _, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); e != 0 {
		fmt.Println("kernel keyrings:", e)
		os.Exit(0)
	}
}

func startFiltered(all bool) {
	if err := intercept.HandOff(3, all); err != nil {
		fmt.Println("install:", err)
		os.Exit(1)
	}
}

func readAll(r interface{ Read([]byte) (int, error) }) (string, error) {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String(), nil
		}
	}
}
