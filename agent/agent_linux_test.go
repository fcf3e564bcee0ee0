package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/keys/bigkey"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
)

func init() {
	testChildren["agent"] = agentChild
	testChildren["connect-many"] = connectManyChild
	testChildren["agent-forger"] = agentForgerChild
	testChildren["agent-send"] = agentSendChild
}

// agentForgerChild is a root process (one without capabilities, in
// the attack) that tries to hand the agent a container: it starts its
// own program under a filter of its own (agentChild: UKEYS_TEST_OP,
// UKEYS_TEST_DESC), in the daemon's namespaces or, as UKEYS_TEST_NS
// says, in new pid and mount namespaces ("pid") or those in a user
// namespace of its own too ("userpid"), or in those of process PID
// ("enter:PID"), hands the program's listener to
// the agent at UKEYS_AGENT in a state naming container UKEYS_TEST_ID and
// process UKEYS_TEST_NAME (or its program), from a child that exits at
// once (agentSendChild), says "sent" once that child has been reaped
// (or, with UKEYS_TEST_ZOMBIE, has exited and is not yet reaped), then
// lets its program make its call and says what came of it.
func agentForgerChild() {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		fmt.Println("socketpair:", err)
		os.Exit(1)
	}
	theirs := os.NewFile(uintptr(fds[1]), "theirs")
	prog := exec.Command(os.Args[0], "-test.run=^$")
	prog.Env = append(os.Environ(), "UKEYS_TEST_CHILD=agent")
	prog.ExtraFiles = []*os.File{theirs}
	switch ns := os.Getenv("UKEYS_TEST_NS"); {
	case strings.HasPrefix(ns, "enter:"):
		// In the pid, mount, IPC and network namespaces of that
		// process (its pid namespace's child of nsenter).
		prog.Args = append([]string{"nsenter", "-t", strings.TrimPrefix(ns, "enter:"), "-p", "-m", "-i", "-n"}, prog.Args...)
		prog.Path, _ = exec.LookPath("nsenter")
	case ns == "pid":
		prog.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	case ns == "userpid":
		// No uid mapped in it: mapping uid 0 needs CAP_SETFCAP.
		prog.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	}
	out, _ := prog.StdoutPipe()
	if err := prog.Start(); err != nil {
		fmt.Println("start:", err)
		os.Exit(1)
	}
	theirs.Close()
	listener, err := intercept.ReceiveListener(fds[0])
	if err != nil {
		fmt.Println("listener:", err)
		os.Exit(1)
	}
	lf := os.NewFile(uintptr(listener), "listener")
	name := os.Getenv("UKEYS_TEST_NAME")
	if name == "" {
		name = strconv.Itoa(prog.Process.Pid)
	}
	send := exec.Command(os.Args[0], "-test.run=^$")
	send.Env = append(os.Environ(), "UKEYS_TEST_CHILD=agent-send", "UKEYS_TEST_PID="+name)
	send.ExtraFiles = []*os.File{lf}
	said, _ := send.StdoutPipe()
	send.Stderr = os.Stderr
	if err := send.Start(); err != nil {
		fmt.Println("send:", err)
		os.Exit(1)
	}
	b, _ := io.ReadAll(said)
	if os.Getenv("UKEYS_TEST_ZOMBIE") != "" {
		// Exited, and left unreaped until the program has made its call.
		var info unix.Siginfo
		unix.Waitid(unix.P_PID, send.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
	} else if err := send.Wait(); err != nil {
		fmt.Println("send:", err, string(b))
		os.Exit(1)
	}
	lf.Close()
	fmt.Println("sent")
	unix.Write(fds[0], []byte{1})
	line, _ := bufio.NewReader(out).ReadString('\n')
	fmt.Print(line)
	unix.Write(fds[0], []byte{1})
	prog.Wait()
	send.Wait()
}

// agentSendChild connects to the agent at UKEYS_AGENT and sends a state
// naming container UKEYS_TEST_ID (in pod sandbox UKEYS_TEST_SANDBOX, if
// set) and process UKEYS_TEST_PID, with the listener it was given (fd 3),
// and exits.
func agentSendChild() {
	pid, _ := strconv.Atoi(os.Getenv("UKEYS_TEST_PID"))
	var st agent.ContainerProcessState
	st.OCIVersion, st.FDs, st.Pid = "1.0.2", []string{"seccompFd"}, pid
	st.State.ID, st.State.Status, st.State.Pid = os.Getenv("UKEYS_TEST_ID"), "creating", pid
	if pod := os.Getenv("UKEYS_TEST_SANDBOX"); pod != "" {
		st.State.Annotations = criPod(pod, false)
	}
	msg, _ := json.Marshal(st)
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: os.Getenv("UKEYS_AGENT"), Net: "unix"})
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	if _, _, err := conn.WriteMsgUnix(msg, unix.UnixRights(3), nil); err != nil {
		fmt.Println("send:", err)
		os.Exit(1)
	}
}

// connectManyChild connects to UKEYS_SOCKET UKEYS_TEST_N times, one
// after the other, each time waiting for the daemon to hang up.
func connectManyChild() {
	n, _ := strconv.Atoi(os.Getenv("UKEYS_TEST_N"))
	for range n {
		c, err := net.Dial("unix", os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		c.Read(make([]byte, 1))
		c.Close()
	}
}

// startFiltered installs the filter of a container's process, which
// hands its listener to the parent on fd 3 (intercept.HandOff).
func startFiltered(all bool) {
	if err := intercept.HandOff(3, all); err != nil {
		fmt.Println("install:", err)
		os.Exit(1)
	}
}

// cstr is s as a C string, for a system call's argument.
func cstr(s string) uintptr { b := append([]byte(s), 0); return uintptr(unsafe.Pointer(&b[0])) }

// agentChild runs under the filter, as a container's process does: it
// hands its listener to its parent (fd 3), waits for the word, then adds
// or searches for a user key in its user keyring (UKEYS_TEST_OP,
// UKEYS_TEST_DESC), says what happened, and waits for a second word
// before it exits.
func agentChild() {
	runtime.LockOSThread()
	startFiltered(false)
	desc := os.Getenv("UKEYS_TEST_DESC")
	var e unix.Errno
	big := make([]byte, 2*bigkey.Inline) // kept in a file
	addBig := func(desc string) unix.Errno {
		_, _, e := unix.Syscall6(unix.SYS_ADD_KEY, cstr("big_key"), cstr(desc), uintptr(unsafe.Pointer(&big[0])), uintptr(len(big)), uintptr(0xfffffffc), 0)
		return e
	}
	switch os.Getenv("UKEYS_TEST_OP") {
	case "fill-big":
		// big_key files until refused: how many, and why.
		n := 0
		for ; n < 1000; n++ {
			if e = addBig(fmt.Sprintf("%s-%d", desc, n)); e != 0 {
				break
			}
		}
		fmt.Println(n, e)
		var w [1]byte
		unix.Read(3, w[:])
		return
	case "add-big":
		e = addBig(desc)
	case "add":
		v := []byte("v")
		_, _, e = unix.Syscall6(unix.SYS_ADD_KEY, cstr("user"), cstr(desc), uintptr(unsafe.Pointer(&v[0])), 1, uintptr(0xfffffffc), 0)
	default:
		_, _, e = unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_SEARCH, uintptr(0xfffffffc), cstr("user"), cstr(desc), 0, 0)
	}
	if e != 0 {
		fmt.Println(e)
	} else {
		fmt.Println("ok")
	}
	var w [1]byte
	unix.Read(3, w[:])
}

// container is one process of a simulated container: started under the
// filter, its listener handed to the agent as runc hands it.
type container struct {
	cmd  *exec.Cmd
	ours *os.File
	said *bufio.Reader
	init int // the host's pid of the container's init
}

// inContainer says where a simulated container's process runs and what
// the state its runtime sends says of it.
type inContainer struct {
	// join: in that process's container (its pid and mount namespaces),
	// as runc exec runs a process; else in a new container of its own,
	// of which it is the init, unless host.
	join *container
	// host: in the daemon's own namespaces, in no container at all.
	host bool
	// pid and initPid, if set, are what the state says (ContainerProcessState.Pid
	// and State.Pid) instead of the truth.
	pid, initPid int
	// pod: in a new container in that process's IPC and network
	// namespaces, as a CRI runtime runs a pod's container; podNS: in
	// IPC and network namespaces of its own too, as a pod's sandbox.
	pod   *container
	podNS bool
	// annotations and metadata are what the state says of the container
	// and of its profile's listenerMetadata.
	annotations map[string]string
	metadata    string
}

// runInContainer starts a process in a new container id (its own pid and
// mount namespaces, as a runtime makes them), which adds or searches for
// desc (op), and hands its listener to the agent at agentSock.
func runInContainer(t *testing.T, agentSock, id, op, desc string) *container {
	t.Helper()
	return startInContainer(t, agentSock, id, op, desc, inContainer{})
}

// runAnother starts another process in c's container, as runc exec
// does.
func (c *container) runAnother(t *testing.T, agentSock, id, op, desc string) *container {
	t.Helper()
	return startInContainer(t, agentSock, id, op, desc, inContainer{join: c})
}

func startInContainer(t *testing.T, agentSock, id, op, desc string, where inContainer) *container {
	t.Helper()
	ukeystest.NeedRoot(t, "to give a container its own pid and mount namespaces")
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := &container{ours: os.NewFile(uintptr(fds[0]), "ours")}
	theirs := os.NewFile(uintptr(fds[1]), "theirs")
	switch {
	case where.join != nil:
		c.init = where.join.init
		c.cmd = exec.Command("nsenter", "-t", strconv.Itoa(c.init), "-p", "-m", os.Args[0], "-test.run=^$")
	case where.host:
		c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	case where.pod != nil:
		// nsenter, in the new pid and mount namespaces, enters the
		// pod's IPC and network namespaces and becomes the program.
		c.cmd = exec.Command("nsenter", "-t", strconv.Itoa(where.pod.init), "-i", "-n", os.Args[0], "-test.run=^$")
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	default:
		c.cmd = exec.Command(os.Args[0], "-test.run=^$")
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
		if where.podNS {
			c.cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET
		}
	}
	c.cmd.Env = append(os.Environ(), "UKEYS_TEST_CHILD=agent", "UKEYS_TEST_OP="+op, "UKEYS_TEST_DESC="+desc)
	c.cmd.ExtraFiles = []*os.File{theirs}
	out, _ := c.cmd.StdoutPipe()
	c.said = bufio.NewReader(out)
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if c.init == 0 {
		c.init = c.cmd.Process.Pid
	}
	theirs.Close()
	t.Cleanup(func() { c.ours.Close(); c.cmd.Process.Kill(); c.cmd.Wait() })
	listener, err := intercept.ReceiveListener(fds[0])
	if err != nil {
		line, _ := c.said.ReadString('\n')
		if strings.HasPrefix(line, "install:") {
			t.Skipf("no seccomp user notification here: %s", line)
		}
		t.Fatalf("no listener from the container's process: %v %s", err, line)
	}
	// As runc sends it: the state, the listener with it.
	var st agent.ContainerProcessState
	st.OCIVersion, st.FDs, st.Pid = "1.0.2", []string{"seccompFd"}, c.init
	st.State.ID, st.State.Status, st.State.Pid = id, "creating", c.init
	st.State.Annotations, st.Metadata = where.annotations, where.metadata
	if where.pid != 0 {
		st.Pid = where.pid
	}
	if where.initPid != 0 {
		st.State.Pid = where.initPid
	}
	msg, _ := json.Marshal(st)
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: agentSock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.WriteMsgUnix(msg, unix.UnixRights(listener), nil); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	unix.Close(listener)
	c.ours.Write([]byte{1})
	return c
}

// result returns what the container's process said of its call.
func (c *container) result(t *testing.T) string {
	t.Helper()
	line, err := c.said.ReadString('\n')
	if err != nil {
		t.Fatalf("the container's process said nothing: %v", err)
	}
	return strings.TrimSpace(line)
}

// exit lets the container's process exit, and waits for it.
func (c *container) exit() {
	c.ours.Write([]byte{1})
	c.cmd.Wait()
}

// Each container is a key namespace of its own: a key added in one is
// invisible in another, shared by the processes of its own, and gone
// once its last process has exited.
func TestAgentContainersAreNamespaces(t *testing.T) {
	dir := t.TempDir()
	a := agent.New(agent.Config{})
	ln, err := server.Listen(filepath.Join(dir, "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		<-served
	}()
	sock := filepath.Join(dir, "agent.sock")

	a1 := runInContainer(t, sock, "ctr-a", "add", "a-key")
	if got := a1.result(t); got != "ok" {
		t.Fatalf("adding in container a: %s", got)
	}
	b1 := runInContainer(t, sock, "ctr-b", "search", "a-key")
	if got := b1.result(t); got != "required key not available" {
		t.Fatalf("container b found container a's key: %s", got)
	}
	a2 := a1.runAnother(t, sock, "ctr-a", "search", "a-key")
	if got := a2.result(t); got != "ok" {
		t.Fatalf("another process of container a: %s", got)
	}
	if got := a.Containers(); !slices.Equal(got, []string{"ctr-a", "ctr-b"}) {
		t.Fatalf("containers %v", got)
	}
	// Their processes exit: the containers' keys go.
	a1.exit()
	a2.exit()
	b1.exit()
	testutil.Eventually(t, "the containers to be reaped", func() bool { return len(a.Containers()) == 0 })
	a3 := runInContainer(t, sock, "ctr-a", "search", "a-key")
	if got := a3.result(t); got != "required key not available" {
		t.Fatalf("a new container a found the old one's key: %s", got)
	}
	a3.exit()
}

// A runtime that disconnects at once, sends what does not decode, sends
// no listener or something else than a listener: each is refused, and
// leaves no container, no descriptor and no goroutine behind.
func TestAgentRuntimeMisbehaves(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	a := agent.New(agent.Config{})
	ln, err := server.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ln) }()
	defer func() {
		if err := a.Shutdown(t.Context()); err != nil {
			t.Error(err)
		}
		<-served
	}()
	openFDs := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd here")
		}
		return len(ents)
	}
	state := func(fds ...string) []byte {
		var st agent.ContainerProcessState
		st.OCIVersion, st.FDs, st.Pid = "1.0.2", fds, os.Getpid()
		st.State.ID, st.State.Status = "ctr-bad", "creating"
		b, _ := json.Marshal(st)
		return b
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	for _, c := range []struct {
		name string
		msg  []byte
		fd   int // -1: none sent
	}{
		{"nothing", nil, -1},
		{"state that does not decode, with a descriptor", []byte(`{"ociVersion": `), p[0]},
		{"no listener", state(), -1},
		{"a pipe for a listener", state("seccompFd"), p[0]},
	} {
		before := openFDs()
		conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		if c.msg != nil {
			var oob []byte
			if c.fd >= 0 {
				oob = unix.UnixRights(c.fd)
			}
			if _, _, err := conn.WriteMsgUnix(c.msg, oob, nil); err != nil {
				t.Fatal(err)
			}
		}
		conn.CloseWrite()
		// The agent hangs up once it has refused.
		conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		if n, err := conn.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: the agent did not hang up: %d %v", c.name, n, err)
		}
		conn.Close()
		testutil.Eventually(t, c.name+": the agent's descriptors to be closed", func() bool { return openFDs() <= before })
		if got := a.Containers(); len(got) != 0 {
			t.Errorf("%s: containers %v", c.name, got)
		}
	}
}

// warnCounter is a log handler that counts the records at Warn or above.
type warnCounter struct{ n *atomic.Int64 }

func (h warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.n.Add(1)
	}
	return nil
}
func (h warnCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h warnCounter) WithGroup(string) slog.Handler      { return h }

// An unprivileged user who connects to the agent's socket in a loop is
// refused each time, and the refusals cost a few log lines, as the main
// socket's do, not one each: before, 92,223 connections in 3 s wrote
// 92,223 lines.
func TestAgentRefusalsAreThrottled(t *testing.T) {
	ukeystest.NeedRoot(t, "to connect as another user")
	dir := worldDir(t)
	sock := filepath.Join(dir, "agent.sock")
	var warned atomic.Int64
	a := agent.New(agent.Config{Logger: slog.New(warnCounter{&warned})})
	ln, err := server.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ln) }()
	defer func() {
		if err := a.Shutdown(t.Context()); err != nil {
			t.Error(err)
		}
		<-served
	}()
	bin := filepath.Join(dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	const n = 300
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = []string{"UKEYS_TEST_CHILD=connect-many", "UKEYS_SOCKET=" + sock, "UKEYS_TEST_N=" + strconv.Itoa(n)}
	cmd.SysProcAttr = ukeystest.As(65534, 65534)
	// Each connection is refused (logged or not) before the agent hangs
	// up, and the child waits for that: once it is done, all were.
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the unprivileged child: %v\n%s", err, out)
	}
	if got := warned.Load(); got == 0 || got > 10 {
		t.Fatalf("%d refused connections wrote %d log lines", n, got)
	}
}

// worldDir returns a directory of the test's own that every user may
// reach (t.TempDir's parent is root's alone), for a child that runs as
// another user.
func worldDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ukeys-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// agentTest starts an agent with cfg serving on a socket in dir, and
// returns it and the socket's path; it is shut down when the test ends.
func agentTest(t *testing.T, dir string, cfg agent.Config) (*agent.Agent, string) {
	t.Helper()
	a := agent.New(cfg)
	sock := filepath.Join(dir, "agent.sock")
	ln, err := server.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		<-served
	})
	return a, sock
}

// forgery is what a forger (agentForgerChild) is and does.
type forgery struct {
	capless bool   // a root process without capabilities
	ns      string // UKEYS_TEST_NS: where its program runs
	id      string // the container its state names
	name    int    // the process its state names (0: its program)
	zombie  bool   // its sending child exited, not yet reaped, when the agent accepts
	sandbox string // the pod sandbox its state's annotations name
	op      string // what its program does (agentChild)
	desc    string
}

var forgeries atomic.Int64

// forge runs forger f against agent a, which it reaches on a socket of
// the agent's in dir that the agent serves only once the forger's
// sending child is gone, and returns what came of its program's call;
// bin is a copy of the test binary that every user may run.
func forge(t *testing.T, a *agent.Agent, dir, bin string, f forgery) string {
	t.Helper()
	late := filepath.Join(dir, fmt.Sprintf("late%d.sock", forgeries.Add(1)))
	ln, err := server.Listen(late)
	if err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	if f.capless {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("needs setpriv (util-linux)")
		}
		cmd = exec.Command(setpriv, "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", bin, "-test.run=^$")
	} else {
		cmd = exec.Command(bin, "-test.run=^$")
	}
	cmd.Env = []string{"GORACE=atexit_sleep_ms=0", "PATH=" + os.Getenv("PATH"), "UKEYS_TEST_CHILD=agent-forger", "UKEYS_AGENT=" + late, "UKEYS_TEST_ID=" + f.id,
		"UKEYS_TEST_NS=" + f.ns, "UKEYS_TEST_OP=" + f.op, "UKEYS_TEST_DESC=" + f.desc}
	if f.name != 0 {
		cmd.Env = append(cmd.Env, "UKEYS_TEST_NAME="+strconv.Itoa(f.name))
	}
	if f.zombie {
		cmd.Env = append(cmd.Env, "UKEYS_TEST_ZOMBIE=1")
	}
	if f.sandbox != "" {
		cmd.Env = append(cmd.Env, "UKEYS_TEST_SANDBOX="+f.sandbox)
	}
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	said := bufio.NewReader(out)
	if line, _ := said.ReadString('\n'); line != "sent\n" {
		cmd.Wait()
		t.Fatalf("the forger: %q", line)
	}
	go a.Serve(ln) // ends at the agent's shutdown
	line, _ := said.ReadString('\n')
	cmd.Wait()
	return strings.TrimSpace(line)
}

// A root process without capabilities (setpriv --bounding-set=-all)
// hands the agent its own program's listener, from a child that has
// exited (and been reaped) before the agent accepts: such a runtime is
// judged by what it hands over, and every container it can hand is
// refused: its program in the daemon's namespaces under container a's
// id; a state naming container a's init, under a's id or another (a's
// pid namespace is a's already); its program in pid namespaces of its
// own, made in a user namespace of its own (no other can it make). Nor
// does a sending child left unreaped help it: its capabilities are read.
// Its program can neither read container a's key nor plant one there.
// Before (0d3718e), a runtime already gone was judged by its uid alone,
// and the program read the key.
func TestAgentCaplessRootCannotJoinAContainer(t *testing.T) {
	ukeystest.NeedRoot(t, "to run a root process without capabilities")
	dir := worldDir(t)
	a, sock := agentTest(t, dir, agent.Config{})
	a1 := runInContainer(t, sock, "ctr-a", "add", "a-secret")
	if got := a1.result(t); got != "ok" {
		t.Fatalf("adding in container a: %s", got)
	}
	bin := filepath.Join(dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	for _, f := range []forgery{
		{id: "ctr-a", op: "search", desc: "a-secret"},
		{id: "ctr-a", op: "add", desc: "planted"},
		{id: "ctr-a", name: a1.init, op: "search", desc: "a-secret"},
		{id: "ctr-a", name: a1.init, op: "add", desc: "planted"},
		{id: "ctr-x", name: a1.init, op: "add", desc: "x"},
		{id: "ctr-y", ns: "userpid", op: "add", desc: "y"},
		{id: "ctr-a", name: a1.init, op: "add", desc: "planted", zombie: true},
		{id: "ctr-z", ns: "userpid", op: "add", desc: "z", zombie: true},
	} {
		f.capless = true
		if got := forge(t, a, dir, bin, f); got != "function not implemented" {
			t.Fatalf("root without capabilities, its runtime gone, its program in namespaces %q, naming container %s and process %d (its program's if 0), zombie %v: its program's %s of %q: %s",
				f.ns, f.id, f.name, f.zombie, f.op, f.desc, got)
		}
	}
	a2 := a1.runAnother(t, sock, "ctr-a", "search", "planted")
	if got := a2.result(t); got != "required key not available" {
		t.Fatalf("container a found the forger's key: %s", got)
	}
	a3 := a1.runAnother(t, sock, "ctr-a", "search", "a-secret")
	if got := a3.result(t); got != "ok" {
		t.Fatalf("container a lost its key: %s", got)
	}
	if got := a.Containers(); !slices.Equal(got, []string{"ctr-a"}) {
		t.Fatalf("containers %v", got)
	}
}

// A runtime with every capability that sends its container and exits
// before the agent accepts (runc does; under load its parent has often
// reaped it by then) is taken on what it handed over: a new container in
// pid namespaces only a privileged process could make is served, as one
// whose runtime the agent could read. A runtime of root's reaped so is
// still refused a container already bound (container a's id, or its pid
// namespace under another id), where a privileged runtime's exec would
// join; one exited and not yet reaped is read, and judged by its
// capabilities. Before, a runtime gone before it was read was refused
// whatever it handed over, and under two busy loops TestDockerContainers
// failed one run in four.
func TestAgentRuntimeGoneBeforeItIsRead(t *testing.T) {
	ukeystest.NeedRoot(t, "to make pid namespaces")
	dir := worldDir(t)
	a, sock := agentTest(t, dir, agent.Config{})
	a1 := runInContainer(t, sock, "ctr-a", "add", "a-secret")
	if got := a1.result(t); got != "ok" {
		t.Fatalf("adding in container a: %s", got)
	}
	bin := filepath.Join(dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	for _, c := range []struct {
		f    forgery
		want string
	}{
		{forgery{id: "ctr-g", ns: "pid", op: "add", desc: "g-key"}, "ok"},
		{forgery{id: "ctr-h", ns: "pid", op: "add", desc: "h-key", zombie: true}, "ok"},
		{forgery{id: "ctr-a", name: a1.init, op: "search", desc: "a-secret"}, "function not implemented"},
		{forgery{id: "ctr-x", name: a1.init, op: "search", desc: "a-secret"}, "function not implemented"},
		{forgery{id: "ctr-u", ns: "userpid", op: "add", desc: "u-key"}, "function not implemented"},
		// Read, as an exec's runtime: it joins container a, and its
		// program, in no namespace of a's, is refused each call.
		{forgery{id: "ctr-a", name: a1.init, op: "search", desc: "a-secret", zombie: true}, "operation not permitted"},
	} {
		if got := forge(t, a, dir, bin, c.f); got != c.want {
			t.Fatalf("a runtime of root's gone (zombie %v), its program in namespaces %q, naming container %s and process %d (its program's if 0): its program's %s of %q: %s, want %s",
				c.f.zombie, c.f.ns, c.f.id, c.f.name, c.f.op, c.f.desc, got, c.want)
		}
	}
	a2 := a1.runAnother(t, sock, "ctr-a", "search", "a-secret")
	if got := a2.result(t); got != "ok" {
		t.Fatalf("container a's own process: %s", got)
	}
}

// A container's id is bound to its processes, whoever hands in a
// listener under it: a state naming container a's id and a process in
// another container is refused while a lives; one naming a's own init
// with another container's listener is taken, but the processes behind
// that listener are not a's and get nothing; a process in the daemon's
// own namespaces is no container; and the agent holds only so many
// containers. Before, the id alone decided, and each of these joined
// a's keys or made a namespace more.
func TestAgentContainerIDIsBoundToItsProcesses(t *testing.T) {
	dir := worldDir(t)
	a, sock := agentTest(t, dir, agent.Config{MaxContainers: 2})
	a1 := runInContainer(t, sock, "ctr-a", "add", "a-secret")
	if got := a1.result(t); got != "ok" {
		t.Fatalf("adding in container a: %s", got)
	}
	x := runInContainer(t, sock, "ctr-a", "search", "a-secret")
	if got := x.result(t); got != "function not implemented" {
		t.Fatalf("another container, under container a's id: %s", got)
	}
	y := startInContainer(t, sock, "ctr-a", "search", "a-secret", inContainer{pid: a1.init, initPid: a1.init})
	if got := y.result(t); got != "operation not permitted" {
		t.Fatalf("another container's listener, in a state naming container a's init: %s", got)
	}
	h := startInContainer(t, sock, "ctr-h", "add", "h-key", inContainer{host: true})
	if got := h.result(t); got != "function not implemented" {
		t.Fatalf("a process in the daemon's own namespaces, as a container: %s", got)
	}
	b1 := runInContainer(t, sock, "ctr-b", "add", "b-key")
	if got := b1.result(t); got != "ok" {
		t.Fatalf("container b: %s", got)
	}
	c1 := runInContainer(t, sock, "ctr-c", "add", "c-key")
	if got := c1.result(t); got != "function not implemented" {
		t.Fatalf("a third container with room for two: %s", got)
	}
	a2 := a1.runAnother(t, sock, "ctr-a", "search", "a-secret")
	if got := a2.result(t); got != "ok" {
		t.Fatalf("container a's own process: %s", got)
	}
	if got := a.Containers(); !slices.Equal(got, []string{"ctr-a", "ctr-b"}) {
		t.Fatalf("containers %v", got)
	}
	// Container a ends; a new container takes its id at once, before the
	// old namespace has seen its last listener go, and has a namespace
	// of its own.
	a1.exit()
	a3 := runInContainer(t, sock, "ctr-a", "search", "a-secret")
	if got := a3.result(t); got != "required key not available" {
		t.Fatalf("a new container a: %s", got)
	}
}

// One container's root fills its share of big_key files, and each of
// its processes the container's share of listeners and processes: the
// cost is its own. Another container adds a big key and has its calls
// served, and so does a host user of the daemon's own Service. Before,
// each container's namespace had the daemon's bounds whole: container
// a's root took every big_key file of the process, and container b and
// the host got EMFILE.
func TestAgentContainerAtItsShareCostsNoOneElse(t *testing.T) {
	prev := keys.SetBigKeyFileLimit(32)
	t.Cleanup(func() { keys.SetBigKeyFileLimit(prev) })
	dir := worldDir(t)
	// 16 big_key files for the containers (2 a container, 1 a uid in
	// one), 16 processes and listeners (2 a container).
	a, sock := agentTest(t, dir, agent.Config{Bounds: agent.Bounds{BigKeyFiles: 16, Procs: 16}})
	base := keys.BigKeyFiles()
	a1 := runInContainer(t, sock, "ctr-a", "fill-big", "a-big")
	if got := a1.result(t); got != "1 disk quota exceeded" {
		t.Fatalf("container a's root filling big_key files: %s", got)
	}
	// Container a's processes: its listener and its process hold its
	// share; one more is refused (its listener is not served).
	a2 := a1.runAnother(t, sock, "ctr-a", "search", "a-big-0")
	if got := a2.result(t); got != "function not implemented" {
		t.Fatalf("a process of container a beyond its share: %s", got)
	}
	b1 := runInContainer(t, sock, "ctr-b", "add-big", "b-big")
	if got := b1.result(t); got != "ok" {
		t.Fatalf("container b, once container a is at its bound: %s", got)
	}
	svc := keys.New()
	defer svc.Close()
	host := svc.NewCaller(keys.Cred{UID: 1000, GID: 1000, PID: os.Getpid()})
	defer host.Release()
	if _, err := host.AddKey("big_key", "host-big", make([]byte, 2*bigkey.Inline), keys.ProcessKeyring); err != nil {
		t.Fatalf("a host user, once container a is at its bound: %v", err)
	}
	if got := a.Containers(); !slices.Equal(got, []string{"ctr-a", "ctr-b"}) {
		t.Fatalf("containers %v", got)
	}
	// Container a ends with its keys in its user keyring: what they
	// held of the containers' bounds and of the process's is given back.
	a1.exit()
	a2.exit()
	testutil.Eventually(t, "container a to be reaped", func() bool { return !slices.Contains(a.Containers(), "ctr-a") })
	// A big key's file is closed when the key is destroyed, which may
	// come a moment after the namespace is gone (the collector's pass).
	for deadline := time.Now().Add(5 * time.Second); keys.BigKeyFiles() != base+2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := keys.BigKeyFiles(); got != base+2 { // container b's and the host's
		t.Fatalf("%d big_key files counted once container a has ended; %d before it began, and 2 of others since", got, base)
	}
	a3 := runInContainer(t, sock, "ctr-a", "fill-big", "a-big")
	if got := a3.result(t); got != "1 disk quota exceeded" {
		t.Fatalf("a new container a's root filling big_key files: %s", got)
	}
}

// criPod returns the annotations containerd's CRI plugin gives the
// containers of pod sandbox, the sandbox's own (pause) if sandbox.
func criPod(pod string, sandbox bool) map[string]string {
	typ := "container"
	if sandbox {
		typ = "sandbox"
	}
	return map[string]string{"io.kubernetes.cri.sandbox-id": pod, "io.kubernetes.cri.container-type": typ}
}

// startPodA starts pod a's sandbox, which finds no ticket, and then its
// sidecar, which adds one, in the sandbox's IPC and network namespaces.
func startPodA(t *testing.T, sock string) (sandbox, sidecar *container) {
	t.Helper()
	sandbox = startInContainer(t, sock, "pod-a", "search", "ticket", inContainer{podNS: true, annotations: criPod("pod-a", true)})
	if got := sandbox.result(t); got != "required key not available" {
		t.Fatalf("pod a's sandbox: %s", got)
	}
	sidecar = startInContainer(t, sock, "a-side", "add", "ticket", inContainer{pod: sandbox, annotations: criPod("pod-a", false)})
	if got := sidecar.result(t); got != "ok" {
		t.Fatalf("pod a's sidecar adding its ticket: %s", got)
	}
	return sandbox, sidecar
}

// Under a CRI runtime a pod is a key namespace: a key its sidecar adds
// its main container finds, and so does a container of the pod that
// CRI-O describes, while a container of another pod, one whose profile
// asks for a namespace of its own, and one of a pod in the host's IPC
// and network namespaces (nothing to bind its sandbox id to) do not.
// A container that names pod a's sandbox from other namespaces (pod b's,
// or its own) is refused: the sandbox id is only a name. The pod's keys
// outlive its sandbox's and sidecar's exit while its main container
// runs, and go with the last of them.
func TestAgentPodIsAKeyNamespace(t *testing.T) {
	ukeystest.NeedRoot(t, "to give pods IPC and network namespaces of their own")
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter (util-linux)")
	}
	a, sock := agentTest(t, t.TempDir(), agent.Config{})
	sa, side := startPodA(t, sock)
	main := startInContainer(t, sock, "a-main", "search", "ticket", inContainer{pod: sa, annotations: criPod("pod-a", false)})
	if got := main.result(t); got != "ok" {
		t.Fatalf("pod a's main container: %s", got)
	}
	crio := startInContainer(t, sock, "a-crio", "search", "ticket", inContainer{pod: sa,
		annotations: map[string]string{"io.kubernetes.cri-o.SandboxID": "pod-a", "io.kubernetes.cri-o.ContainerType": "container"}})
	if got := crio.result(t); got != "ok" {
		t.Fatalf("a container of pod a as CRI-O describes it: %s", got)
	}
	own := startInContainer(t, sock, "a-own", "search", "ticket", inContainer{pod: sa, annotations: criPod("pod-a", false),
		metadata: agent.NotifyMetadata + " " + agent.PerContainerMetadata})
	if got := own.result(t); got != "required key not available" {
		t.Fatalf("a container of pod a with a key namespace of its own: %s", got)
	}
	sb := startInContainer(t, sock, "pod-b", "search", "ticket", inContainer{podNS: true, annotations: criPod("pod-b", true)})
	if got := sb.result(t); got != "required key not available" {
		t.Fatalf("pod b's sandbox: %s", got)
	}
	b1 := startInContainer(t, sock, "b-main", "search", "ticket", inContainer{pod: sb, annotations: criPod("pod-b", false)})
	if got := b1.result(t); got != "required key not available" {
		t.Fatalf("pod b's container found pod a's ticket: %s", got)
	}
	// The attacks: pod a's sandbox named from pod b's namespaces, or
	// from namespaces of its own.
	for _, w := range []inContainer{
		{pod: sb, annotations: criPod("pod-a", false)},
		{podNS: true, annotations: criPod("pod-a", false)},
		{podNS: true, annotations: criPod("pod-a", true)},
	} {
		x := startInContainer(t, sock, fmt.Sprintf("x-%d", forgeries.Add(1)), "search", "ticket", w)
		if got := x.result(t); got != "function not implemented" {
			t.Fatalf("a container naming pod a's sandbox from other namespaces (pod b's: %v): %s", w.pod != nil, got)
		}
	}
	host := startInContainer(t, sock, "h-main", "search", "ticket", inContainer{annotations: criPod("pod-a", false)})
	if got := host.result(t); got != "required key not available" {
		t.Fatalf("a container in the host's IPC and network namespaces naming pod a's sandbox: %s", got)
	}
	if got := a.Pods(); !slices.Equal(got, []string{"pod-a", "pod-b"}) {
		t.Fatalf("pods %v", got)
	}

	// The sandbox and the sidecar exit; the main container runs, and the
	// pod's keys stay for a container started then.
	for _, c := range []*container{sa, side, crio, own, host} {
		c.exit()
	}
	testutil.Eventually(t, "the exited containers to leave", func() bool { return len(a.Containers()) == 3 })
	late := startInContainer(t, sock, "a-late", "search", "ticket", inContainer{pod: main, annotations: criPod("pod-a", false)})
	if got := late.result(t); got != "ok" {
		t.Fatalf("a container of pod a once its sandbox and sidecar have exited: %s", got)
	}
	main.exit()
	late.exit()
	testutil.Eventually(t, "pod a's keys to go", func() bool { return !slices.Contains(a.Pods(), "pod-a") })
	sa2 := startInContainer(t, sock, "pod-a", "search", "ticket", inContainer{podNS: true, annotations: criPod("pod-a", true)})
	if got := sa2.result(t); got != "required key not available" {
		t.Fatalf("a new pod a found the old one's ticket: %s", got)
	}
	sa2.exit()
	sb.exit()
	b1.exit()
	testutil.Eventually(t, "every pod's keys to go", func() bool { return len(a.Pods()) == 0 && len(a.Containers()) == 0 })
}

// A pod's containers may share one pid namespace (shareProcessNamespace):
// a runtime gone before it could be read that hands in such a container
// of pod a is served from pod a's namespace, though its pid namespace is
// already a container's. The same container handed in as no pod's, or as
// pod b's, is refused: a pid namespace is bound once, and pod b's
// sandbox to pod b's namespaces.
func TestAgentPodSharesItsPids(t *testing.T) {
	ukeystest.NeedRoot(t, "to give pods namespaces of their own")
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter (util-linux)")
	}
	dir := t.TempDir()
	a, sock := agentTest(t, dir, agent.Config{})
	sa := startInContainer(t, sock, "pod-a", "search", "ticket", inContainer{podNS: true, annotations: criPod("pod-a", true)})
	if got := sa.result(t); got != "required key not available" {
		t.Fatalf("pod a's sandbox: %s", got)
	}
	side := startInContainer(t, sock, "a-side", "add", "ticket", inContainer{pod: sa, annotations: criPod("pod-a", false)})
	if got := side.result(t); got != "ok" {
		t.Fatalf("pod a's sidecar: %s", got)
	}
	sb := startInContainer(t, sock, "pod-b", "search", "ticket", inContainer{podNS: true, annotations: criPod("pod-b", true)})
	if got := sb.result(t); got != "required key not available" {
		t.Fatalf("pod b's sandbox: %s", got)
	}
	enter := "enter:" + strconv.Itoa(side.init)
	for _, c := range []struct {
		sandbox, want string
	}{
		{"pod-a", "ok"},
		{"", "function not implemented"},
		{"pod-b", "function not implemented"},
	} {
		f := forgery{id: "a-main-" + c.sandbox, ns: enter, name: side.init, sandbox: c.sandbox, op: "search", desc: "ticket"}
		if got := forge(t, a, dir, os.Args[0], f); got != c.want {
			t.Fatalf("a runtime gone before it was read, handing a container in pod a's sidecar's pid namespace as pod %q's: %s, want %s",
				c.sandbox, got, c.want)
		}
	}
}
