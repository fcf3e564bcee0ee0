package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
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
	"github.com/ukeys/ukeys/server"
)

// The unit files in deploy/systemd are ones systemd accepts, with the
// binary where they name it.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("needs systemd-analyze (Debian package systemd)")
	}
	dir := t.TempDir()
	for _, name := range []string{"ukeyd.service", "ukeyd.socket"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		// The units name /usr/local/bin/ukeyd: here, this test binary
		// stands in for it, so that verify finds an executable.
		text := strings.ReplaceAll(string(b), "/usr/local/bin/ukeyd", os.Args[0])
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(analyze, "verify", "--man=no", filepath.Join(dir, "ukeyd.service"), filepath.Join(dir, "ukeyd.socket"))
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// notifySocket listens where a daemon's sd_notify messages go
// (NOTIFY_SOCKET), as systemd does.
type notifySocket struct {
	c    *net.UnixConn
	path string
}

func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &notifySocket{c: c, path: path}
}

// next returns the next message and the descriptors that came with it.
func (n *notifySocket) next(t *testing.T) (string, []int) {
	t.Helper()
	n.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	b := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4*8))
	k, oobn, _, _, err := n.c.ReadMsgUnix(b, oob)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range msgs {
			if r, err := unix.ParseUnixRights(&msgs[i]); err == nil {
				fds = append(fds, r...)
			}
		}
	}
	return string(b[:k]), fds
}

// Started by systemd's socket unit, ukeyd serves the socket it is given
// (LISTEN_FDS) and says when it serves (READY=1); a daemon that takes over
// from it tells systemd it is the main process (MAINPID) before the old
// one lets go, then that it serves.
func TestSystemdActivationAndTakeover(t *testing.T) {
	dir, socket, lf := socketUnit(t)
	ns := newNotifySocket(t)
	_, stderr, done := startActivated(t, ns, []*os.File{lf}, []string{"ukeyd.socket"}, "-socket", filepath.Join(dir, "unused.sock"))
	lf.Close()
	if msg, _ := ns.next(t); msg != "READY=1" {
		t.Fatalf("first notification %q\n%s", msg, stderr.String())
	}
	c, err := client.Dial(socket)
	if err != nil {
		t.Fatalf("the activated socket: %v\n%s", err, stderr.String())
	}
	defer c.Close()
	id, err := c.AddKey("user", "activated", []byte("v"), keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "unused.sock")); err == nil {
		t.Error("the daemon made a socket of its own beside the one systemd passed")
	}

	// The take-over, as ExecReload runs it.
	re := exec.Command(os.Args[0], childArg, "-takeover", "-detach", "-socket", socket, "-request-key", "")
	re.Env = append(os.Environ(), "NOTIFY_SOCKET="+ns.path)
	// A file, not a pipe, as systemd's journal stream is: the daemon it
	// starts keeps writing there after it returns.
	logf, err := os.Create(filepath.Join(dir, "reload.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	re.Stdout, re.Stderr = logf, logf
	if err := re.Run(); err != nil {
		out, _ := os.ReadFile(logf.Name())
		t.Fatalf("ukeyd -takeover -detach: %v\n%s", err, out)
	}
	msg, _ := ns.next(t)
	pid, ok := strings.CutPrefix(msg, "MAINPID=")
	if !ok {
		t.Fatalf("the new daemon's first notification %q", msg)
	}
	if msg, _ := ns.next(t); msg != "READY=1" {
		t.Fatalf("the new daemon's second notification %q", msg)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the old daemon exited: %v\n%s", err, stderr.String())
		}
		done <- nil
	case <-time.After(20 * time.Second):
		t.Fatal("the old daemon did not exit")
	}
	if got := daemonPID(t, socket); pid != strconv.Itoa(got) {
		t.Fatalf("MAINPID=%s, but pid %d serves", pid, got)
	}
	if b, err := c.Read(id); err != nil || string(b) != "v" {
		t.Fatalf("the key after the take-over: %q %v", b, err)
	}
	p, _ := strconv.Atoi(pid)
	syscall.Kill(p, syscall.SIGTERM)
}

// A daemon that makes its own socket keeps it in systemd's
// file-descriptor store, so that a restart gets it back.
func TestSystemdFDStore(t *testing.T) {
	ns := newNotifySocket(t)
	socket := filepath.Join(t.TempDir(), "ukeyd.sock")
	d := startChild(t, socket, childOpts{env: []string{"NOTIFY_SOCKET=" + ns.path}})
	msg, fds := ns.next(t)
	for _, fd := range fds {
		defer unix.Close(fd)
	}
	if msg != "FDSTORE=1\nFDNAME=ukeyd" || len(fds) != 1 {
		t.Fatalf("first notification %q with %d descriptors\n%s", msg, len(fds), d.stderrText())
	}
	// The descriptor is the listening socket.
	if name, err := unix.Getsockname(fds[0]); err != nil || name.(*unix.SockaddrUnix).Name != socket {
		t.Fatalf("the stored descriptor is bound to %v (%v), want %s", name, err, socket)
	}
	if msg, _ := ns.next(t); msg != "READY=1" {
		t.Fatalf("second notification %q", msg)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t)
}

// socketUnit makes what systemd's socket unit holds: a listening socket
// in a directory of the test's, and the file of it to pass on (closed
// when the test ends).
func socketUnit(t *testing.T) (dir, socket string, lf *os.File) {
	t.Helper()
	dir = t.TempDir()
	socket = filepath.Join(dir, "ukeyd.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if lf, err = ln.File(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lf.Close() })
	return dir, socket, lf
}

// startActivated starts a daemon child as systemd would: fds from fd 3
// on, named, LISTEN_PID its own (a shell that execs the daemon knows
// it), NOTIFY_SOCKET ns.
func startActivated(t *testing.T, ns *notifySocket, files []*os.File, names []string, args ...string) (*exec.Cmd, *testutil.Buffer, chan error) {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", `LISTEN_PID=$$ exec "$0" "$@"`, os.Args[0], childArg,
		"-request-key", ""}, args...)...)
	cmd.Env = append(os.Environ(), "LISTEN_FDS="+strconv.Itoa(len(files)), "LISTEN_FDNAMES="+strings.Join(names, ":"), "NOTIFY_SOCKET="+ns.path)
	cmd.ExtraFiles = files
	var stderr testutil.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		done <- nil
	})
	return cmd, &stderr, done
}

// Under systemd with -fdstore-state, a stop for a restart keeps every
// key and connection in systemd's file-descriptor store (a sealed memfd
// and the sockets), and the next daemon takes them back: a client's open
// connection goes on with its session and keys, and the store is emptied.
//
// The next daemon may run with -takeover=auto (a unit shared with a
// DaemonSet's image): the socket systemd holds accepts connections with
// no daemon behind it, and the next one must start from the store, not
// try to take over from nobody.
func TestSystemdRestartKeepsState(t *testing.T) {
	for _, mode := range []string{"-takeover=false", "-takeover=auto"} {
		t.Run(mode, func(t *testing.T) { testSystemdRestartKeepsState(t, mode) })
	}
}

func testSystemdRestartKeepsState(t *testing.T, mode string) {
	_, socket, lf := socketUnit(t)
	ns := newNotifySocket(t)
	first, stderr, done := startActivated(t, ns, []*os.File{lf}, []string{"ukeyd.socket"}, "-fdstore-state", "-socket", socket)
	if msg, _ := ns.next(t); msg != "READY=1" {
		t.Fatalf("first notification %q\n%s", msg, stderr.String())
	}
	c, err := client.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.JoinSessionKeyring(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.AddKey("user", "kept", []byte("across a restart"), keys.SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	payloads := [][]byte{[]byte("across a restart")}
	for i := range 50 {
		p := fmt.Appendf(nil, "fdstore-secret-%04d-%s", i, strings.Repeat("x", i))
		if _, err := c.AddKey("user", fmt.Sprint("kept", i), p, keys.SessionKeyring); err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, p)
	}

	// systemd stops it: everything goes to the store.
	first.Process.Signal(syscall.SIGTERM)
	var files []*os.File
	var names []string
	var state *os.File
	for {
		msg, fds := ns.next(t)
		if msg == "STOPPING=1" {
			break
		}
		name, ok := strings.CutPrefix(msg, "FDSTORE=1\nFDNAME=")
		if !ok || len(fds) != 1 {
			t.Fatalf("a notification %q with %d descriptors\n%s", msg, len(fds), stderr.String())
		}
		f := os.NewFile(uintptr(fds[0]), name)
		defer f.Close()
		if name == "ukeyd-state" {
			state = f
		} else {
			files, names = append(files, f), append(names, name)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("the stopped daemon: %v\n%s", err, stderr.String())
	}
	done <- nil
	if state == nil || len(files) == 0 {
		t.Fatalf("stored: state %v, %d descriptors", state != nil, len(files))
	}
	// Sealed against every change, and holding no payload in the clear:
	// a memfd is shmem, which is swapped out like any anonymous memory.
	checkStateSealed(t, state, payloads)

	// systemd starts the next one with the socket and the store.
	all := append([]*os.File{lf, state}, files...)
	allNames := append([]string{"ukeyd.socket", "ukeyd-state"}, names...)
	next, stderr2, done2 := startActivated(t, ns, all, allNames, "-fdstore-state", mode, "-socket", socket)
	removed := 0
	for {
		msg, _ := ns.next(t)
		if msg == "READY=1" {
			break
		}
		if !strings.HasPrefix(msg, "FDSTOREREMOVE=1\nFDNAME=ukeyd-") {
			t.Fatalf("the next daemon said %q\n%s", msg, stderr2.String())
		}
		removed++
	}
	if removed != len(all)-1 {
		t.Errorf("%d descriptors removed from the store, want %d", removed, len(all)-1)
	}
	// The client's connection, open all along, finds its session and key.
	if got, err := c.GetKeyringID(keys.SessionKeyring, false); err != nil || got != sess {
		t.Fatalf("the session after the restart: %d %v, want %d\n%s", got, err, sess, stderr2.String())
	}
	if b, err := c.Read(id); err != nil || string(b) != "across a restart" {
		t.Fatalf("the key after the restart: %q %v", b, err)
	}
	if !strings.Contains(stderr2.String(), "back from a restart") {
		t.Errorf("the next daemon's log:\n%s", stderr2.String())
	}
	next.Process.Signal(syscall.SIGINT)
	if err := <-done2; err != nil {
		t.Fatalf("the next daemon: %v\n%s", err, stderr2.String())
	}
	done2 <- nil
}

// checkStateSealed fails t unless the kept state carries every seal
// (nothing can write, grow or shrink it, or take a seal away) and none
// of payloads appears in it.
func checkStateSealed(t *testing.T, state *os.File, payloads [][]byte) {
	t.Helper()
	seals, err := unix.FcntlInt(state.Fd(), unix.F_GET_SEALS, 0)
	if want := unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL; err != nil || seals&want != want {
		t.Errorf("the state's seals: %#x %v, want %#x", seals, err, want)
	}
	st, err := state.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, st.Size())
	if _, err := state.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	// The byte that is there already: a write that succeeds changes
	// nothing.
	if _, err := state.WriteAt(b[:1], 0); err == nil {
		t.Errorf("a write into the kept state succeeded")
	}
	found := 0
	for _, p := range payloads {
		if bytes.Contains(b, p) {
			found++
		}
	}
	if found > 0 {
		t.Errorf("%d of %d payloads in the clear in the kept state (%d bytes)", found, len(payloads), len(b))
	}
}

// A state that is not sealed against writing (a memfd anyone holding it
// could have changed) is refused, and so is one whose key is missing:
// the next daemon starts afresh, and says why.
func TestSystemdRestartRefusesUnsealedState(t *testing.T) {
	_, socket, lf := socketUnit(t)
	ns := newNotifySocket(t)
	for _, c := range []struct {
		name  string
		seals int
		key   bool
		want  string
	}{
		{"unsealed", unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL, true, "not sealed against change"},
		{"no key", unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL, false, "without its key"},
		// Sealed as the previous daemon's (TestSystemdRestartTakesBackThePreviousState)
		// but claiming this one's format: neither.
		{"as the previous", unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL, false, "without its key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mfd, err := unix.MemfdCreate("ukeyd-state", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
			if err != nil {
				t.Fatal(err)
			}
			state := os.NewFile(uintptr(mfd), "ukeyd-state")
			defer state.Close()
			key := make([]byte, stateKeyLen)
			bw, err := newBoxWriter(state, key)
			if err != nil {
				t.Fatal(err)
			}
			bw.Write([]byte("anything"))
			bw.Close()
			if _, err := unix.FcntlInt(uintptr(mfd), unix.F_ADD_SEALS, c.seals); err != nil {
				t.Fatal(err)
			}
			files, names := []*os.File{lf, state}, []string{"ukeyd.socket", "ukeyd-state"}
			if c.key {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				defer w.Close()
				w.Write(key)
				files, names = append(files, r, w), append(names, "ukeyd-state-key", "ukeyd-state-key-w")
			}
			next, stderr, done := startActivated(t, ns, files, names, "-fdstore-state", "-socket", socket)
			for {
				msg, _ := ns.next(t)
				if msg == "READY=1" {
					break
				}
			}
			// The log is written before READY=1, but reaches the
			// buffer through a pipe that os/exec copies on its own
			// goroutine: it may come a little after.
			said := func() bool {
				return strings.Contains(stderr.String(), "starting afresh") && strings.Contains(stderr.String(), c.want)
			}
			for end := time.Now().Add(10 * time.Second); !said() && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
			}
			if !said() {
				t.Errorf("the daemon's log, want %q:\n%s", c.want, stderr.String())
			}
			next.Process.Signal(syscall.SIGINT)
			if err := <-done; err != nil {
				t.Fatalf("the daemon: %v\n%s", err, stderr.String())
			}
			done <- nil
		})
	}
}

// An upgrade loses nothing: the state the daemon before this one kept in
// systemd's store (the plaintext stream in a memfd sealed only against a
// change of size, with no key beside it: freezeToSystemd of 050dce3) is
// taken back once by the next daemon, every key with it, and then wiped;
// the store is emptied.
func TestSystemdRestartTakesBackThePreviousState(t *testing.T) {
	_, socket, lf := socketUnit(t)
	ns := newNotifySocket(t)

	// The daemon before: a server in this process, stopped as that
	// daemon's freezeToSystemd stopped it.
	svc := keys.New()
	defer svc.Close()
	srv := server.New(svc, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ln, err := server.Listen(filepath.Join(t.TempDir(), "previous.sock"))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	c, err := client.Dial(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	payloads := map[string][]byte{}
	for i := range 20 {
		name, p := fmt.Sprint("upgraded", i), fmt.Appendf(nil, "previous-format-secret-%04d-%s", i, strings.Repeat("y", i*50))
		id, err := c.AddKey("user", name, p, keys.UserKeyring)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.SetPerm(id, keys.PermMask); err != nil {
			t.Fatal(err)
		}
		payloads[name] = p
	}
	c.Close()
	mfd, err := unix.MemfdCreate("ukeyd-state", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	state := os.NewFile(uintptr(mfd), "ukeyd-state")
	defer state.Close()
	kept, err := srv.Freeze(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != server.ErrHandedOver {
		t.Fatalf("the previous daemon's Serve: %v", err)
	}
	if _, err := unix.FcntlInt(uintptr(mfd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		t.Fatal(err)
	}
	st, err := state.Stat()
	if err != nil {
		t.Fatal(err)
	}
	files := []*os.File{lf, state}
	names := []string{"ukeyd.socket", "ukeyd-state"}
	for i, fd := range kept {
		f := os.NewFile(uintptr(fd), fmt.Sprint("ukeyd-fd-", i))
		defer f.Close()
		files, names = append(files, f), append(names, f.Name())
	}

	next, stderr, done := startActivated(t, ns, files, names, "-fdstore-state", "-socket", socket)
	removed := 0
	for {
		msg, _ := ns.next(t)
		if msg == "READY=1" {
			break
		}
		if strings.HasPrefix(msg, "FDSTOREREMOVE=1\nFDNAME=ukeyd-") {
			removed++
		}
	}
	if removed < len(files)-1 {
		t.Errorf("%d descriptors removed from the store, want %d", removed, len(files)-1)
	}
	c, err = client.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for name, want := range payloads {
		id, err := c.Search(keys.UserKeyring, "user", name, 0)
		if err != nil {
			t.Fatalf("%s after the upgrade: %v\n%s", name, err, stderr.String())
		}
		if b, err := c.Read(id); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("%s after the upgrade: %q %v", name, b, err)
		}
	}
	if !strings.Contains(stderr.String(), "back from a restart") || !strings.Contains(stderr.String(), "previous daemon's format") {
		t.Errorf("the next daemon's log:\n%s", stderr.String())
	}
	// It held every payload in the clear: wiped.
	b := make([]byte, st.Size())
	if _, err := state.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if i := bytes.IndexFunc(b, func(r rune) bool { return r != 0 }); i >= 0 {
		t.Errorf("the previous state (%d bytes) is not wiped: a byte at %d", len(b), i)
	}
	next.Process.Signal(syscall.SIGINT)
	if err := <-done; err != nil {
		t.Fatalf("the next daemon: %v\n%s", err, stderr.String())
	}
	done <- nil
}
