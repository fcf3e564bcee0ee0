package server_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
	"github.com/ukeys/ukeys/wire"
)

func init() {
	testChildren["userns-socket"] = usernsSocketChild
	testChildren["userns-intercepted"] = usernsInterceptedChild
	testChildren["capless-connect"] = caplessConnectChild
	testChildren["capless-use"] = caplessUseChild
}

// usernsSocketChild asks for uid 0's persistent keyring over the socket,
// then looks for root's key in it and reads it, printing each answer. It
// speaks the protocol itself: an attacker need not use the client
// package, whose trust in a socket owned by a uid its namespace does not
// map would stop it first.
func usernsSocketChild() {
	c := childDial()
	defer c.Close()
	r := childPersistent(c, 0)
	fmt.Println("get_persistent:", errText(errnoErr(r.Errno)))
	if r.Errno != 0 {
		return
	}
	r, err := rawCall(c, 2, wire.OpSearch, wire.Int(r.Ints[0]), wire.Str("user"), wire.Str("root-secret"), wire.Int(0))
	if err != nil || r.Errno != 0 {
		fmt.Println("search:", err, r)
		return
	}
	r, err = rawCall(c, 3, wire.OpRead, wire.Int(r.Ints[0]))
	fmt.Println("read:", r, err)
}

// childDial connects a test child to UKEYS_SOCKET and says hello; the
// child exits on failure.
func childDial() net.Conn {
	c, err := net.Dial("unix", os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	if err := hello(c); err != nil {
		fmt.Println("hello:", err)
		os.Exit(1)
	}
	return c
}

// childPersistent asks for uid's persistent keyring on c, linked into
// the session; the child exits if the call cannot be made.
func childPersistent(c net.Conn, uid int64) *wire.Response {
	r, err := rawCall(c, 1, wire.OpGetPersistent, wire.Int(uid), wire.Int(int64(keys.SessionKeyring)))
	if err != nil {
		fmt.Println("call:", err)
		os.Exit(1)
	}
	return r
}

// hello opens the conversation as a client does.
func hello(c net.Conn) error {
	if err := wire.WriteFrame(c, wire.EncodeHello(wire.Version)); err != nil {
		return err
	}
	_, err := wire.ReadFrame(c, nil)
	return err
}

// rawCall makes one call in the protocol, by hand.
func rawCall(c net.Conn, tag uint32, op wire.Op, args ...wire.Value) (*wire.Response, error) {
	var r wire.Request
	if err := r.Set(op, args...); err != nil {
		return nil, err
	}
	r.Tag = tag
	b, err := wire.AppendRequest(nil, &r)
	if err != nil {
		return nil, err
	}
	if err := wire.WriteFrame(c, b); err != nil {
		return nil, err
	}
	body, err := wire.ReadFrame(c, nil)
	if err != nil {
		return nil, err
	}
	return wire.DecodeResponse(body)
}

// usernsInterceptedChild makes the same calls as system calls under the
// filter, its listener handed to the test over fd 3.
func usernsInterceptedChild() {
	runtime.LockOSThread()
	fd, err := intercept.Install()
	if err != nil {
		fmt.Println("install:", err)
		os.Exit(1)
	}
	if err := intercept.SendListener(3, fd); err != nil {
		fmt.Println("send:", err)
		os.Exit(1)
	}
	unix.Close(fd)
	var w [1]byte
	unix.Read(3, w[:])
	cstr := func(s string) uintptr { b := append([]byte(s), 0); return uintptr(unsafe.Pointer(&b[0])) }
	ring, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_PERSISTENT, 0, uintptr(0xfffffffd))
	fmt.Println("get_persistent:", errText(errOrNil(e)))
	if e != 0 {
		return
	}
	id, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_SEARCH, ring, cstr("user"), cstr("root-secret"), 0, 0)
	fmt.Println("search:", errText(errOrNil(e)))
	if e != 0 {
		return
	}
	buf := make([]byte, 64)
	n, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_READ, id, uintptr(unsafe.Pointer(&buf[0])), 64, 0, 0)
	fmt.Printf("read: %q %s\n", buf[:min(int(n), 64)], errText(errOrNil(e)))
}

func errOrNil(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// A process that makes a user namespace of its own (unshare -Ur, open to
// any user) holds every capability there, and capget(2) and its /proc
// status show them as if they were the host's. The kernel's capable()
// counts them only in the initial namespace, so such a process may not
// have uid 0's persistent keyring (CAP_SETUID); neither may it from the
// daemon, over its socket or through an intercepted call. Before, it
// could: it got root's persistent keyring and read root's key in it.
func TestUserNamespaceCapabilitiesCountForNothing(t *testing.T) {
	ukeystest.NeedRoot(t, "to run a process as another uid")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	d := ukeystest.NewDaemon(t, ukeystest.WithDirMode(0o755))
	root := d.Dial(t)
	pk, err := root.GetPersistent(-1, keys.SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.AddKey("user", "root-secret", []byte("root's secret"), pk); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(d.Dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	asUser := []string{"--reuid=1003", "--regid=1003", "--clear-groups"}
	if out, err := exec.Command(setpriv, append(asUser, unshare, "-Ur", "true")...).CombinedOutput(); err != nil {
		t.Skipf("no user namespaces for other users here: %v %s", err, out)
	}
	for _, how := range []string{"socket", "intercepted"} {
		for _, ns := range []bool{false, true} {
			args := asUser
			if ns {
				args = append(slices.Clone(asUser), unshare, "-Ur")
			}
			cmd := exec.Command(setpriv, append(args, bin, "-test.run=^$")...)
			cmd.Env = []string{"UKEYS_SOCKET=" + d.Socket, "UKEYS_TEST_CHILD=userns-" + how}
			out := new(strings.Builder)
			cmd.Stdout, cmd.Stderr = out, out
			if how == "socket" {
				if err := cmd.Run(); err != nil {
					t.Fatalf("%s child: %v\n%s", how, err, out)
				}
			} else {
				fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
				cmd.ExtraFiles = []*os.File{theirs}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				theirs.Close()
				fd, err := intercept.ReceiveListener(fds[0])
				if err != nil {
					cmd.Wait()
					ours.Close()
					if strings.HasPrefix(out.String(), "install:") {
						t.Skipf("no seccomp user notification here: %s", out)
					}
					t.Fatalf("no listener: %v\n%s", err, out)
				}
				served := make(chan error, 1)
				go func() { served <- d.Server.ServeListener(fd) }()
				ours.Write([]byte{1})
				err = cmd.Wait()
				<-served
				ours.Close()
				if err != nil {
					t.Fatalf("%s child: %v\n%s", how, err, out)
				}
			}
			if got, want := out.String(), "get_persistent: error: operation not permitted\n"; got != want {
				t.Errorf("uid 1003 %s, in a user namespace of its own %v: said\n%s\nwant\n%s", how, ns, got, want)
			}
		}
	}
}

// caplessConnectChild is root without a capability (a container's root,
// a service with an empty bounding set). It connects to the daemon,
// hands the connection to a child of its own, and exits.
func caplessConnectChild() { syscall.Close(connectForChild()) }

// connectForChild connects to the daemon at $UKEYS_SOCKET and starts a
// child of its own (caplessUseChild) that makes its request on that
// connection, which the process that made it then leaves (exiting,
// exec'ing). It returns the connection's descriptor.
func connectForChild() int {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		fmt.Println("socket:", err)
		os.Exit(1)
	}
	if err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: os.Getenv("UKEYS_SOCKET")}); err != nil {
		fmt.Println("connect:", err)
		os.Exit(1)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "UKEYS_TEST_CHILD=capless-use")
	cmd.ExtraFiles = []*os.File{os.NewFile(uintptr(fd), "conn")}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Println("start:", err)
		os.Exit(1)
	}
	return fd
}

// caplessUseChild asks, on the connection its parent made, for another
// uid's persistent keyring, which takes CAP_SETUID.
func caplessUseChild() {
	c, err := net.FileConn(os.NewFile(3, "conn"))
	if err != nil {
		fmt.Println("conn:", err)
		os.Exit(1)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	if err := hello(c); err != nil {
		fmt.Println("hello:", err)
		os.Exit(1)
	}
	r, err := rawCall(c, 1, wire.OpGetPersistent, wire.Int(65534), wire.Int(int64(keys.ProcessKeyring)))
	if err != nil {
		fmt.Println("call:", err)
		os.Exit(1)
	}
	fmt.Println("get_persistent:", errText(errnoErr(r.Errno)))
}

func errnoErr(e uint16) error {
	if e == 0 {
		return nil
	}
	return syscall.Errno(e)
}

// A uid-0 process without capabilities that connects and is gone
// before the daemon accepts cannot have its capabilities read: they
// are then known to be none. Before, they were left unknown, which made
// uid 0 privileged, so such a process gained every capability by
// handing its connection to a child and exiting. The daemon here starts
// accepting only once the process has exited and been reaped.
func TestCapabilitiesOfAPeerGoneBeforeAcceptAreNone(t *testing.T) {
	ukeystest.NeedRoot(t, "to run a root process without capabilities")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ukeyd.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	svc := keys.New()
	defer svc.Close()
	srv := server.New(svc, server.Config{})
	bin := filepath.Join(dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", bin, "-test.run=^$")
	cmd.Env = []string{"UKEYS_SOCKET=" + path, "UKEYS_TEST_CHILD=capless-connect"}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// Reaped, not waited for: its child holds the pipe until it is done.
	if st, err := cmd.Process.Wait(); err != nil || !st.Success() {
		t.Fatalf("the connecting process: %v %v", st, err)
	}
	if got, want := serveUntilRead(t, srv, ln, r), "get_persistent: error: operation not permitted\n"; got != want {
		t.Fatalf("root without capabilities, gone before accept: said\n%s\nwant\n%s", got, want)
	}
}

// serveUntilRead starts srv serving ln, which has had connections
// waiting on it, reads r to its end (what the children that use them
// say), and shuts srv down.
func serveUntilRead(t *testing.T, srv *server.Server, ln *net.UnixListener, r *os.File) string {
	t.Helper()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	out := new(strings.Builder)
	if _, err := io.Copy(out, r); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-served
	return out.String()
}
