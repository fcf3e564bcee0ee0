package server_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// hangScript is a request-key helper that never answers. It records its
// pid (naming the file) and the key, starts a child of its own, then
// becomes this test binary (same pid), which connects to the daemon with
// the helper token and waits forever. Arguments: dir, test binary, then
// the kernel's create <key> <uid> <gid> <thread> <process> <session>. The
// shell starts in a moment, so the records exist long before the
// timeout.
const hangScript = `d=$1 bin=$2; shift 2
sleep 3600 &
echo $! > "$d/grandchild"
echo "$2" > "$d/helper.$$"
exec "$bin" hang-helper "$d" "$@"`

// childHang is the hanging helper once it has become this test binary.
func childHang() {
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		os.Exit(1)
	}
	defer c.Close()
	select {}
}

// running reports whether pid is a live process: neither gone nor a
// zombie waiting for its parent.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// A helper that hangs is killed at the upcall timeout with its children,
// the key is negated, its connection to the daemon ends, and the daemon
// keeps serving.
func TestRequestKeyHelperHangs(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to see the helper's processes")
	}
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("needs sleep(1) for the helper's child")
	}
	dir := t.TempDir()
	var srv atomic.Pointer[server.Server]
	var sock atomic.Pointer[string] // see TestShutdownKillsHangingHelper
	up := keys.UpcallFunc(func(ctx context.Context, u *keys.Upcall) error {
		h := server.Helper{Path: "/bin/sh", Args: []string{"-c", hangScript, "sh", dir, os.Args[0]}, Socket: *sock.Load()}
		return srv.Load().Upcaller(h).Upcall(ctx, u)
	})
	d := startDaemonCfg(t, server.Config{}, keys.WithUpcall(up), keys.WithUpcallTimeout(time.Second))
	sock.Store(&d.path)
	srv.Store(d.srv)
	c := d.dial(t)
	conns := func() string {
		st, err := c.Status()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(st, "\n") {
			if strings.HasPrefix(l, "connections:") {
				return l
			}
		}
		return ""
	}
	before := conns()

	if _, err := c.RequestKey("user", "hangs", []byte("info"), 0); !errors.Is(err, keys.ENOKEY) {
		t.Fatalf("request-key with a hanging helper: %v, want ENOKEY", err)
	}
	helpers, _ := filepath.Glob(filepath.Join(dir, "helper.*"))
	if len(helpers) != 1 {
		t.Fatalf("%d helpers ran, want 1", len(helpers))
	}
	helperPID, _ := strconv.Atoi(strings.TrimPrefix(filepath.Ext(helpers[0]), "."))
	b, _ := os.ReadFile(filepath.Join(dir, "grandchild"))
	grandchild, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	b, _ = os.ReadFile(helpers[0])
	key, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if helperPID == 0 || grandchild == 0 || key == 0 {
		t.Fatalf("helper records: pid %d, child %d, key %d", helperPID, grandchild, key)
	}
	// The requester is answered as soon as the key is negated; the kill
	// follows. The helper's child dies with its process group and,
	// reparented, is reaped by whoever adopts it.
	testutil.Eventually(t, "the helper to be killed", func() bool { return !running(helperPID) })
	testutil.Eventually(t, "the helper's child to be killed", func() bool { return !running(grandchild) })

	// Negated: asking again fails at once, without another upcall, until
	// the negative key expires.
	if _, err := c.RequestKey("user", "hangs", []byte("info"), 0); !errors.Is(err, keys.ENOKEY) {
		t.Fatalf("request-key of the negated key: %v, want ENOKEY", err)
	}
	if again, _ := filepath.Glob(filepath.Join(dir, "helper.*")); len(again) != 1 {
		t.Fatalf("a negated key ran the helper again: %d helpers", len(again))
	}
	if proc, err := c.ProcKeys(); err != nil || !strings.Contains(proc, fmt.Sprintf("%08x", key)) {
		t.Fatalf("/proc/keys does not list the negated key %08x: %v\n%s", key, err, proc)
	}

	// The helper's connection is gone and the daemon serves on.
	testutil.Eventually(t, "the helper's connection to close", func() bool { return conns() == before })
	id, err := c.AddKey("user", "after", []byte("x"), keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := c.Read(id); err != nil || string(p) != "x" {
		t.Fatalf("Read after the hang: %q, %v", p, err)
	}
}

// A shutdown whose context ends while a request-key helper hangs (one
// that never connects, so closing connections does not end it) kills the
// helper instead of waiting for the upcall timeout (an hour here).
func TestShutdownKillsHangingHelper(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("needs sleep(1) for the helper")
	}
	dir := t.TempDir()
	// Set once the daemon runs, read by upcalls: atomics, since the
	// request that starts an upcall travels over a socket, which orders
	// nothing for the race detector.
	var srv atomic.Pointer[server.Server]
	var sock atomic.Pointer[string]
	const sleeper = `echo $$ > "$1/helper.$$"; exec sleep 3600`
	up := keys.UpcallFunc(func(ctx context.Context, u *keys.Upcall) error {
		h := server.Helper{Path: "/bin/sh", Args: []string{"-c", sleeper, "sh", dir}, Socket: *sock.Load()}
		return srv.Load().Upcaller(h).Upcall(ctx, u)
	})
	d := startDaemonCfg(t, server.Config{}, keys.WithUpcall(up), keys.WithUpcallTimeout(time.Hour))
	sock.Store(&d.path)
	srv.Store(d.srv)
	c := d.dial(t)
	asked := make(chan error, 1)
	go func() {
		_, err := c.RequestKey("user", "hangs", []byte("info"), 0)
		asked <- err
	}()
	var helpers []string
	testutil.Eventually(t, "the helper to start", func() bool {
		helpers, _ = filepath.Glob(filepath.Join(dir, "helper.*"))
		return len(helpers) == 1
	})
	helperPID, _ := strconv.Atoi(strings.TrimPrefix(filepath.Ext(helpers[0]), "."))

	shutdownEndsAtDeadline(t, d.srv, 100*time.Millisecond, "the hanging helper")
	testutil.Eventually(t, "the helper to be killed", func() bool { return !running(helperPID) })
	if err := <-asked; err == nil {
		t.Fatal("the request succeeded although its helper was killed")
	}
}

// A request-key helper runs as the daemon's user, and what it starts is
// counted as that user's: a few users asking for keys whose handlers are
// slow once filled root's share of processes, and root's own were
// refused. A requesting uid may now have only a thirty-second of a uid's
// bound running at once (two here); the request over it fails at once
// with EDQUOT, without a helper, as a request whose helper cannot start
// fails with that helper's error in the kernel.
func TestUpcallsBoundedPerRequester(t *testing.T) {
	dir := t.TempDir()
	var srv atomic.Pointer[server.Server]
	var sock atomic.Pointer[string]
	up := keys.UpcallFunc(func(ctx context.Context, u *keys.Upcall) error {
		h := server.Helper{Path: "/bin/sh", Args: []string{"-c", `touch "$0/helper.$$"; exec sleep 60`, dir}, Socket: *sock.Load()}
		return srv.Load().Upcaller(h).Upcall(ctx, u)
	})
	d := startDaemonCfg(t, server.Config{Limits: server.Limits{MaxProcsPerUID: 64}}, keys.WithUpcall(up), keys.WithUpcallTimeout(2*time.Second))
	sock.Store(&d.path)
	srv.Store(d.srv)
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			c := d.dial(t)
			_, err := c.RequestKey("user", fmt.Sprintf("slow%d", i), []byte("info"), 0)
			errs <- err
		}()
	}
	var timedOut, refused int
	for range 3 {
		switch err := <-errs; {
		case errors.Is(err, keys.ENOKEY): // its helper never answered
			timedOut++
		case errors.Is(err, keys.EDQUOT): // no helper for it
			refused++
		default:
			t.Errorf("request_key: %v", err)
		}
	}
	if timedOut != 2 || refused != 1 {
		t.Errorf("one uid's three requests at once: %d timed out, %d refused; want 2 and 1", timedOut, refused)
	}
	if ran, _ := filepath.Glob(filepath.Join(dir, "helper.*")); len(ran) != 2 {
		t.Fatalf("%d helpers ran for one uid's three requests at once, want 2", len(ran))
	}
}

// shutdownEndsAtDeadline shuts srv down with a context that ends after
// d, and fails unless Shutdown returns that context's end, in a minute
// at most, rather than waiting for what (something stuck) to end.
func shutdownEndsAtDeadline(t *testing.T, srv *server.Server, d time.Duration, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Shutdown(ctx) }()
	select {
	case err := <-stopped:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v, want its context's deadline", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("Shutdown waits for %s", what)
	}
}
