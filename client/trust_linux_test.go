package client

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Linux only: listenAs relies on Linux's per-thread credentials.

// listenAs makes a listening socket at path whose SO_PEERCRED names uid.
// The kernel records the credentials of the thread that calls listen, so
// one locked thread takes euid uid for that call alone: setresuid as a
// raw system call changes only the calling thread (syscall.Setresuid
// would change them all).
func listenAs(t *testing.T, path string, uid int) *net.UnixListener {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		// Never unlocked: had the uid not come back, the thread would
		// end with this goroutine rather than run others.
		runtime.LockOSThread()
		const keep = ^uintptr(0)
		if _, _, e := syscall.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
			done <- e
			return
		}
		err := syscall.Listen(fd, 8)
		if _, _, e := syscall.RawSyscall(unix.SYS_SETRESUID, keep, 0, keep); e != 0 {
			err = errors.Join(err, e)
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.(*net.UnixListener)
}

// received returns what the first caller on ln sent before closing.
func received(ln *net.UnixListener) <-chan []byte {
	ch := make(chan []byte, 1)
	go func() {
		ln.SetDeadline(time.Now().Add(10 * time.Second))
		c, err := ln.Accept()
		if err != nil {
			ch <- []byte("accept: " + err.Error())
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil {
			b = append(b, "read: "+err.Error()...)
		}
		ch <- b
	}()
	return ch
}

// A socket in a root directory that passes checkSocketPath, served by
// another uid: refused on SO_PEERCRED, with nothing sent.
func TestDialChecksPeer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to listen as other uids")
	}
	dir := shortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(dir, "other.sock")
	got := received(listenAs(t, path, testOther))
	conn, err := dialUnix(path, time.Second, false)
	if err == nil {
		conn.Write([]byte("hello"))
		conn.Close()
		t.Fatal("dialled a socket served by uid 1002")
	}
	want := "ukeys: refusing to use " + path + ": the daemon answering there runs as uid 1002, not as you (uid 0) or root"
	if !errors.Is(err, ErrUntrusted) || err.Error() != want {
		t.Fatalf("got %v, want ErrUntrusted: %q", err, want)
	}
	if b := <-got; len(b) != 0 {
		t.Fatalf("the impostor received %q", b)
	}

	path = filepath.Join(dir, "root.sock")
	got = received(listenAs(t, path, 0))
	conn, err = dialUnix(path, time.Second, false)
	if err != nil {
		t.Fatalf("a root daemon in a root directory: %v", err)
	}
	conn.Write([]byte("hello"))
	conn.Close()
	if b := <-got; string(b) != "hello" {
		t.Fatalf("root's listener received %q", b)
	}

	// The caller's own daemon is trusted, another user's is not.
	for _, c := range []struct {
		listener int
		ok       bool
	}{{testUser, true}, {0, true}, {testOther, false}} {
		path := filepath.Join(dir, "peer"+strconv.Itoa(c.listener)+".sock")
		ln := listenAs(t, path, c.listener)
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
			t.Fatal(err)
		}
		err = checkPeer(fd, path, testUser)
		syscall.Close(fd)
		ln.Close()
		if c.ok != (err == nil) || !c.ok && !errors.Is(err, ErrUntrusted) {
			t.Errorf("caller %d, listener %d: %v", testUser, c.listener, err)
		}
	}
}
