package server_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
)

func init() { testChildren["many-threads"] = manyThreadsChild }

// manyThreadsChild puts all its threads under the filter, hands the
// listener to the daemon (as ukeyctl run does), has 256 threads make one
// key call each and exit, says how many calls failed, and waits for its
// standard input to close.
func manyThreadsChild() {
	runtime.LockOSThread()
	fd, err := intercept.InstallAll()
	if err != nil {
		fmt.Println("install:", err)
		os.Exit(1)
	}
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	if err := c.Intercept(fd); err != nil {
		fmt.Println("intercept:", err)
		os.Exit(1)
	}
	unix.Close(fd)
	c.Close()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	fails := 0
	for range 256 {
		wg.Go(func() {
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			<-start
			if _, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffc), 0); e != 0 {
				mu.Lock()
				fails++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	fmt.Printf("%d failed\n", fails)
	io.Copy(io.Discard, os.Stdin)
}

// A seccomp listener keeps a descriptor of each calling thread's /proc
// status and of each calling process's memory, up to 256 of each. They
// are charged to the uid the listener serves, as the processes it keeps
// are: before, no bound counted them, and one uid's listeners, each with
// threads that made a call and exited, filled the daemon's descriptor
// table until accept failed for every uid. They may take half the uid's
// bound; over it, a listener serves its callers without keeping
// descriptors, and its user's processes still connect.
func TestListenerDescriptorsAreChargedToTheirUID(t *testing.T) {
	ukeystest.NeedRoot(t, "to run processes as another uid")
	if !intercept.Available() {
		t.Skip("no seccomp user notification here")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	dir, err := os.MkdirTemp("", "ukeys-budget-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	path := filepath.Join(dir, "run", "ukeyd.sock")
	svc := keys.New()
	defer svc.Close()
	const perUID = 24
	srv := server.New(svc, server.Config{Logger: quiet, Limits: server.Limits{MaxProcsPerUID: perUID, MaxProcs: 4 * perUID}})
	ln, err := server.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() { srv.Shutdown(t.Context()); <-served }()
	bin := filepath.Join(dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	before := openFDs(t)
	const listeners = 3
	for range listeners {
		cmd := exec.Command(setpriv, "--reuid=1003", "--regid=1003", "--clear-groups", bin, "-test.run=^$")
		cmd.Env = []string{"UKEYS_SOCKET=" + path, "UKEYS_TEST_CHILD=many-threads"}
		stdin, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line != "0 failed\n" {
			t.Fatalf("uid 1003's calls: %q", line)
		}
	}
	// What the listeners keep of their callers: at most half the uid's
	// bound (the rest goes to the listeners and the uid's processes
	// themselves), beside a few descriptors of each listener's own and
	// this test's pipes to its children; without the budget, hundreds.
	if grown := openFDs(t) - before; grown > perUID+8*listeners {
		t.Errorf("the daemon holds %d descriptors more for uid 1003's %d listeners; its bound is %d", grown, listeners, perUID)
	}
	// Another uid is served.
	victim := exec.Command(setpriv, "--reuid=1004", "--regid=1004", "--clear-groups", bin, "-test.run=^$")
	victim.Env = []string{"UKEYS_SOCKET=" + path, "UKEYS_TEST_CHILD=budget-victim"}
	if out, err := victim.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "added" {
		t.Errorf("uid 1004 after uid 1003's listeners: %v %s", err, out)
	}
}

func init() {
	testChildren["budget-victim"] = func() {
		c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			fmt.Println("dial:", err)
			return
		}
		defer c.Close()
		if _, err := c.AddKey("user", "k", []byte("v"), keys.UserKeyring); err != nil {
			fmt.Println("add_key:", err)
			return
		}
		fmt.Println("added")
	}
}
