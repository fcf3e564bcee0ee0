package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
)

// clientArg as the first argument makes this test binary a client that
// holds what it can of the daemon: clientMain.
const clientArg = "ukeyd-test-client"

// childLimits applies the daemon child's test-only environment: a
// descriptor limit (UKEYD_TEST_NOFILE), and descriptors burnt before the
// daemon starts until only UKEYD_TEST_LEAVE_FDS are free, so that its
// table fills sooner than the bounds it derives from RLIMIT_NOFILE
// expect.
func childLimits() error {
	if s := os.Getenv("UKEYD_TEST_NOFILE"); s != "" {
		// Scanned into the field itself: its type differs between systems
		// (uint64 on Linux and macOS, int64 on FreeBSD).
		var rl unix.Rlimit
		if _, err := fmt.Sscan(s, &rl.Cur); err != nil {
			return err
		}
		rl.Max = rl.Cur
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			return err
		}
	}
	if s := os.Getenv("UKEYD_TEST_LEAVE_FDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				break
			}
			burnt = append(burnt, f)
		}
		for _, f := range burnt[len(burnt)-min(n, len(burnt)):] {
			f.Close()
		}
		burnt = burnt[:len(burnt)-min(n, len(burnt))]
	}
	return nil
}

// burnt keeps the burnt descriptors reachable: a finalizer would close
// them otherwise.
var burnt []*os.File

// clientMain dials the daemon at UKEYS_SOCKET conns times, in a process
// of its own (linger: each connection adds a key and closes, and the
// process stays; hold: the connections stay open), prints one line
// "ok N refused ERRNO..." and waits for its standard input to close.
func clientMain(args []string) int {
	mode, conns := args[0], 1
	if len(args) > 1 {
		conns, _ = strconv.Atoi(args[1])
	}
	var held []*client.Client
	ok := 0
	var refused []string
	for i := range conns {
		c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			var ce *client.Error
			if errors.As(err, &ce) {
				refused = append(refused, strconv.Itoa(int(ce.Errno)))
			} else {
				refused = append(refused, "other:"+err.Error())
			}
			continue
		}
		ok++
		if mode == "linger" {
			c.AddKey("user", fmt.Sprintf("linger-%d-%d", os.Getpid(), i), []byte("x"), keys.SessionKeyring)
			c.Close()
			continue
		}
		held = append(held, c)
	}
	fmt.Printf("ok %d refused %s\n", ok, strings.Join(refused, ","))
	io.Copy(io.Discard, os.Stdin)
	for _, c := range held {
		c.Close()
	}
	return 0
}

// attacker is a client process started by the test.
type attacker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	line  string
}

// startClients runs n client processes of uid in mode, each dialling
// conns times, and returns once each has said how it fared.
func startClients(t *testing.T, bin, socket string, uid uint32, n int, mode string, conns int) []*attacker {
	t.Helper()
	var out []*attacker
	for range n {
		cmd := exec.Command(bin, clientArg, mode, strconv.Itoa(conns))
		cmd.Env = []string{"UKEYS_SOCKET=" + socket}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		a := &attacker{cmd: cmd, stdin: in}
		t.Cleanup(a.stop)
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			t.Fatalf("client %s: %v", mode, err)
		}
		a.line = strings.TrimSpace(line)
		out = append(out, a)
	}
	return out
}

func (a *attacker) stop() {
	if a.cmd.ProcessState != nil {
		return
	}
	a.stdin.Close()
	a.cmd.Process.Kill()
	a.cmd.Wait()
}

// rootDir returns a directory every uid can read, holding a copy of this
// test binary that every uid can run, and the daemon's socket path in it.
func rootDir(t *testing.T) (bin, socket string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test runs its clients as uids 1000 and 1001")
	}
	dir, err := os.MkdirTemp("", "ukeyd-limits-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "client.test")
	src, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, filepath.Join(dir, "run", "ukeyd.sock")
}

// openFDs counts the daemon's open descriptors.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// victimServed checks that uid 1001 can add and read a key now.
func victimServed(t *testing.T, bin, socket string) {
	t.Helper()
	v := startClients(t, bin, socket, 1001, 1, "linger", 1)[0]
	if v.line != "ok 1 refused" {
		t.Fatalf("another uid is not served: %q", v.line)
	}
	v.stop()
}

// A uid that opens far more lingering processes and connections than the
// daemon has descriptors is refused with EDQUOT once it holds its share;
// the daemon never runs out of descriptors, another uid is served all
// along, and the daemon never exits.
func TestOneUIDCannotExhaustTheDaemon(t *testing.T) {
	bin, socket := rootDir(t)
	const nofile = 128
	d := startChild(t, socket, childOpts{env: []string{"UKEYD_TEST_NOFILE=" + strconv.Itoa(nofile)}})
	lingerers := startClients(t, bin, socket, 1000, 40, "linger", 1)
	holders := startClients(t, bin, socket, 1000, 4, "hold", 60)
	refused := 0
	for _, a := range append(lingerers, holders...) {
		if strings.Contains(a.line, "other") {
			t.Fatalf("a refused client was not told why: %q", a.line)
		}
		refused += strings.Count(a.line, strconv.Itoa(int(keys.EDQUOT)))
	}
	if refused == 0 {
		t.Fatalf("40 processes and 240 connections of one uid, none refused: %q", holders[0].line)
	}
	victimServed(t, bin, socket)
	if n := openFDs(t, d.cmd.Process.Pid); n >= nofile {
		t.Fatalf("the daemon holds %d descriptors of %d", n, nofile)
	}
	select {
	case err := <-d.done:
		d.done <- err
		t.Fatalf("the daemon exited: %v", err)
	default:
	}
	t.Logf("%d connections of uid 1000 refused with EDQUOT; the daemon holds %d descriptors", refused, openFDs(t, d.cmd.Process.Pid))
}

// When the descriptor table fills anyway (here: descriptors burnt before
// the daemon started, so its derived bounds are too generous), accept
// fails with EMFILE; the daemon backs off and keeps serving what it
// holds, and serves new callers again once descriptors are free.
func TestAcceptEMFILEDoesNotEndTheDaemon(t *testing.T) {
	bin, socket := rootDir(t)
	d := startChild(t, socket, childOpts{env: []string{"UKEYD_TEST_NOFILE=96", "UKEYD_TEST_LEAVE_FDS=12"},
		args: []string{"-max-conns-per-uid", "1000", "-max-procs-per-uid", "1000"}})
	// The holders do not wait to be told how they fared: once the table
	// is full, their last connections wait in the listener's backlog.
	var holders []*attacker
	for range 3 {
		cmd := exec.Command(bin, clientArg, "hold", "30")
		cmd.Env = []string{"UKEYS_SOCKET=" + socket}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		a := &attacker{cmd: cmd, stdin: in}
		t.Cleanup(a.stop)
		holders = append(holders, a)
	}
	testutil.Eventually(t, "accept to fail with EMFILE", func() bool {
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("the daemon exited: %v\n%s", err, d.stderrText())
		default:
		}
		return strings.Contains(d.stderrText(), "accept failed")
	})
	for _, a := range holders {
		a.stop()
	}
	// The daemon releases what the holders held, and serves again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		v := startClients(t, bin, socket, 1001, 1, "linger", 1)[0]
		v.stop()
		if v.line == "ok 1 refused" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon does not serve again once descriptors are free: %q\n%s", v.line, d.stderrText())
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case err := <-d.done:
		d.done <- err
		t.Fatalf("the daemon exited: %v\n%s", err, d.stderrText())
	default:
	}
}
