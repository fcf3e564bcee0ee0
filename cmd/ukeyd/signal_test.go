package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
)

// childArg as the first argument makes this test binary the daemon: it
// runs run() with the remaining arguments, as main does, and then checks
// that every goroutine it started has stopped (exit status 3 if not).
const childArg = "ukeyd-child"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == clientArg {
		os.Exit(clientMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == usernsClientArg {
		os.Exit(usernsClient(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == storeArg {
		os.Exit(storeMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == childArg {
		if err := childLimits(); err != nil {
			fmt.Fprintln(os.Stderr, "ukeyd child:", err)
			os.Exit(4)
		}
		code := run(os.Args[2:])
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "ukeyd: goroutines left after exit:", err)
				code = 3
			}
		}
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

type child struct {
	cmd    *exec.Cmd
	stderr *testutil.Buffer
	done   chan error
}

// stderrText returns what the daemon has logged so far.
func (c *child) stderrText() string { return c.stderr.String() }

// childOpts adds to a daemon child's environment and flags, and sets its
// process attributes.
type childOpts struct {
	env, args []string
	attr      *syscall.SysProcAttr
	// defaultSocket starts the daemon without -socket, as README does:
	// it finds its socket itself (the test gives it socket through the
	// environment).
	defaultSocket bool
}

// startChild runs the daemon on socket and waits until it serves.
func startChild(t *testing.T, socket string, opts ...childOpts) *child {
	t.Helper()
	c := spawnChild(t, socket, opts...)
	testutil.Eventually(t, "the daemon to serve", func() bool {
		select {
		case err := <-c.done:
			c.done <- err
			t.Fatalf("the daemon exited: %v\n%s", err, c.stderr)
		default:
		}
		cl, err := client.Dial(socket)
		if err != nil {
			return false
		}
		defer cl.Close()
		_, err = cl.Status()
		return err == nil
	})
	return c
}

// spawnChild runs the daemon on socket, killed when the test ends.
func spawnChild(t *testing.T, socket string, opts ...childOpts) *child {
	t.Helper()
	c := &child{stderr: &testutil.Buffer{}, done: make(chan error, 1)}
	args := []string{childArg, "-socket", socket, "-request-key", "", "-metrics", "127.0.0.1:0", "-log-level", "debug"}
	var o childOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.defaultSocket {
		args = slices.Delete(args, 1, 3)
	}
	c.cmd = exec.Command(os.Args[0], append(args, o.args...)...)
	c.cmd.Env = append(os.Environ(), o.env...)
	c.cmd.SysProcAttr = o.attr
	c.cmd.Stderr = c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.done
		c.done <- nil
	})
	return c
}

// wait returns the daemon's exit status.
func (c *child) wait(t *testing.T) int {
	t.Helper()
	select {
	case err := <-c.done:
		c.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		t.Fatalf("the daemon did not exit\n%s", c.stderr)
		return -1
	}
}

// SIGTERM under load: every operation either completes correctly or
// fails because the connection closed; the daemon exits 0 with every
// goroutine stopped and its socket removed.
func TestSIGTERMUnderLoad(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "ukeyd.sock")
	d := startChild(t, socket)
	const clients = 8
	var ok, closed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := client.Dial(socket)
			if err != nil {
				closed.Add(1)
				return
			}
			defer cl.Close()
			for n := 0; ; n++ {
				want := fmt.Sprintf("payload-%d-%d", i, n)
				id, err := cl.AddKey("user", fmt.Sprintf("c%d-k%d", i, n%50), []byte(want), keys.UserKeyring)
				if err == nil {
					var got []byte
					if got, err = cl.Read(id); err == nil && string(got) != want {
						errs <- fmt.Errorf("client %d read %q, want %q", i, got, want)
						return
					}
				}
				var ce *client.Error
				switch {
				case err == nil:
					ok.Add(1)
				case errors.As(err, &ce):
					errs <- fmt.Errorf("client %d: %v during shutdown", i, err)
					return
				default: // the connection closed
					closed.Add(1)
					return
				}
			}
		}()
	}
	testutil.Eventually(t, "load", func() bool { return ok.Load() > 1000 })
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := d.wait(t)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if code != 0 {
		t.Fatalf("exit status %d after SIGTERM\n%s", code, d.stderr)
	}
	if _, err := os.Lstat(socket); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	t.Logf("%d operations completed by %d clients; %d connections closed by the shutdown", ok.Load(), clients, closed.Load())
}

// SIGKILL leaves a stale socket behind; the next daemon detects that no
// one answers on it, replaces it and starts clean. A daemon started while
// another serves the socket refuses to start.
func TestSIGKILLThenRestart(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "ukeyd.sock")
	first := startChild(t, socket)
	cl, err := client.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	id, err := cl.AddKey("user", "before", []byte("x"), keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	// A second daemon on a live socket.
	second := exec.Command(os.Args[0], childArg, "-socket", socket, "-request-key", "")
	if out, err := second.CombinedOutput(); second.ProcessState.ExitCode() != 1 || !bytes.Contains(out, []byte("in use")) {
		t.Fatalf("second daemon on a live socket: %v\n%s", err, out)
	}
	first.cmd.Process.Kill()
	if code := first.wait(t); code == 0 {
		t.Fatal("a killed daemon exited 0")
	}
	if _, err := cl.Read(id); err == nil {
		t.Fatal("a killed daemon answered")
	}
	cl.Close()
	if st, err := os.Lstat(socket); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("no stale socket to replace: %v", err)
	}
	startChild(t, socket)
	cl, err = client.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Read(id); !errors.Is(err, keys.ENOKEY) {
		t.Fatalf("the restarted daemon knows the old key: %v", err)
	}
	if _, err := cl.AddKey("user", "after", []byte("y"), keys.UserKeyring); err != nil {
		t.Fatalf("the restarted daemon: %v", err)
	}
}
