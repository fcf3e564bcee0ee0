package procview

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/ukeystest"
)

// store is a key namespace for a test: a store holding one user key
// desc of root's, and its files' view (without possession: a fresh
// caller, where the daemon's would be the process's own).
func store(t *testing.T, desc string, maxkeys int) Namespace {
	t.Helper()
	tun := keys.DefaultTunables()
	tun.MaxKeys = maxkeys
	svc := keys.New(keys.WithTunables(tun))
	t.Cleanup(func() { svc.Close() })
	c := svc.NewCaller(keys.Cred{UID: 0, GID: 0, PID: 1})
	t.Cleanup(c.Release)
	if _, err := c.AddKey("user", desc, []byte("v"), keys.UserKeyring); err != nil {
		t.Fatal(err)
	}
	return Namespace{Keys: svc, ProcKeys: func(cred keys.Cred, tid int) (string, error) {
		r := svc.NewCaller(cred)
		defer r.Release()
		return r.ProcKeysAs(cred), nil
	}}
}

// mount mounts the files with cfg in a directory every user may
// reach, or skips the test where FUSE or root is missing.
func mount(t *testing.T, cfg Config) (string, *Server) {
	t.Helper()
	ukeystest.NeedRoot(t, "mounting a FUSE file system")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse")
	}
	dir, err := os.MkdirTemp("", "ukeys-procview-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := Mount(dir, cfg)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return dir, s
}

// readers maps the pids of the test's readers to their namespaces.
type readers struct {
	mu sync.Mutex
	ns map[int]Namespace
}

// lookup finds the namespace of pid or of its nearest ancestor that
// has one: a reader's children (the shell's cat) are in its namespace,
// as a container's are in its.
func (r *readers) lookup(pid int) (Namespace, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for pid > 1 {
		if ns, ok := r.ns[pid]; ok {
			return ns, true
		}
		ppid, _, ok := process.Stat(pid)
		if !ok {
			break
		}
		pid = ppid
	}
	return Namespace{}, false
}

// read runs sh -c script as a reader in namespace ns (none if nil),
// with attr, and returns what it printed: the reader waits for a line
// on its input until its pid is in rs.
func (r *readers) read(t *testing.T, ns *Namespace, attr *syscall.SysProcAttr, script string) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", "read _; "+script)
	cmd.SysProcAttr = attr
	in, _ := cmd.StdinPipe()
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if ns != nil {
		r.mu.Lock()
		r.ns[cmd.Process.Pid] = *ns
		r.mu.Unlock()
	}
	in.Write([]byte("go\n"))
	in.Close()
	cmd.Wait()
	return out.String()
}

// Each reader sees its own namespace's keys, key-users and sysctls,
// never another's nor the host's; a host process sees the daemon's
// own store; a process in a namespace of its own that no key namespace
// holds gets ENOENT; only a namespace's root may write a sysctl, and in
// its own namespace only.
func TestFilesAnswerEachReaderFromItsNamespace(t *testing.T) {
	a, b, host := store(t, "key-of-a", 111), store(t, "key-of-b", 222), store(t, "key-of-host", 333)
	rs := &readers{ns: map[int]Namespace{}}
	dir, _ := mount(t, Config{Lookup: rs.lookup, Host: &host})
	f := func(name string) string { return filepath.Join(dir, name) }
	maxkeys := f("sys/kernel/keys/maxkeys")

	got := rs.read(t, &a, nil, "cat "+f("keys")+" "+f("key-users")+" "+maxkeys)
	if !strings.Contains(got, " user      key-of-a: 1\n") || strings.Contains(got, "key-of-b") || strings.Contains(got, "key-of-host") {
		t.Errorf("a's reader sees:\n%s", got)
	}
	if !strings.Contains(got, "    0:     ") || !strings.HasSuffix(got, "\n111\n") {
		t.Errorf("a's key-users and maxkeys:\n%s", got)
	}
	if got := rs.read(t, &b, nil, "cat "+f("keys")); !strings.Contains(got, "key-of-b") || strings.Contains(got, "key-of-a") {
		t.Errorf("b's reader sees:\n%s", got)
	}
	// The test itself is a host process.
	if got, err := os.ReadFile(f("keys")); err != nil || !strings.Contains(string(got), "key-of-host") || strings.Contains(string(got), "key-of-a") {
		t.Errorf("a host process sees: %v\n%s", err, got)
	}
	// In a mount namespace of its own, as a container that shares the
	// host's pids is, and in no key namespace.
	if got := rs.read(t, nil, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}, "cat "+f("keys")+"; echo rc=$?"); !strings.Contains(got, "No such file") || strings.Contains(got, "key-of") {
		t.Errorf("a process in no key namespace, not the host's: %s", got)
	}

	// a's root writes a's maxkeys; b's is b's still.
	if got := rs.read(t, &a, nil, "echo 444 > "+maxkeys+" && cat "+maxkeys); got != "444\n" {
		t.Errorf("a's root writing maxkeys: %q", got)
	}
	if a.Keys.Tunables().MaxKeys != 444 || b.Keys.Tunables().MaxKeys != 222 || host.Keys.Tunables().MaxKeys != 333 {
		t.Errorf("maxkeys of a, b, host: %d %d %d", a.Keys.Tunables().MaxKeys, b.Keys.Tunables().MaxKeys, host.Keys.Tunables().MaxKeys)
	}
	// /bin/echo: dash's own echo reports every failed write as EIO.
	if got := rs.read(t, &a, nil, "/bin/echo nonsense > "+maxkeys+"; /bin/echo 0 > "+maxkeys); !strings.Contains(got, "Invalid argument") {
		t.Errorf("a bad write: %q", got)
	}
	// Another user in a: reads, and may not write.
	nobody := ukeystest.As(65534, 65534)
	if got := rs.read(t, &a, nobody, "cat "+maxkeys+"; echo 5 > "+maxkeys); !strings.HasPrefix(got, "444\n") || !strings.Contains(got, "ermission denied") {
		t.Errorf("another user of a: %q", got)
	}
	if got := rs.read(t, &a, nil, "echo x > "+f("keys")); !strings.Contains(got, "ermission denied") {
		t.Errorf("writing keys: %q", got)
	}
	if a.Keys.Tunables().MaxKeys != 444 {
		t.Errorf("maxkeys after refused writes: %d", a.Keys.Tunables().MaxKeys)
	}
}

// A thread's request names the thread: its process's namespace answers.
func TestResolveAThread(t *testing.T) {
	a := store(t, "key-of-a", 111)
	v := newView(Config{Lookup: func(pid int) (Namespace, bool) { return a, pid == os.Getpid() }})
	done := make(chan int)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		done <- syscall.Gettid()
	}()
	tid := <-done
	ns, r, errno := v.resolve(tid)
	if errno != 0 || ns.Keys != a.Keys || r.pid != os.Getpid() {
		t.Errorf("thread %d of %d: %v, pid %d", tid, os.Getpid(), errno, r.pid)
	}
}

// A reader in no namespace gets ENOENT, a host process included when
// the daemon's own store is not offered; and a reader whose pid changes
// hands while its namespace is looked up (it exits, and the pid may be
// another's) gets nothing, even though the lookup found a namespace.
func TestResolveWhoReads(t *testing.T) {
	a := store(t, "key-of-a", 111)
	none := newView(Config{Lookup: func(int) (Namespace, bool) { return Namespace{}, false }})
	if _, _, errno := none.resolve(os.Getpid()); errno != syscall.ENOENT {
		t.Errorf("a host process, no host view: %v", errno)
	}
	none.cfg.Host = &a
	if ns, _, errno := none.resolve(os.Getpid()); errno != 0 || ns.Keys != a.Keys {
		t.Errorf("a host process, with the host view: %v", errno)
	}
	if _, _, errno := none.resolve(0); errno != syscall.ENOENT {
		t.Errorf("a reader the daemon cannot see (pid 0): %v", errno)
	}

	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	var found bool
	gone := newView(Config{Lookup: func(pid int) (Namespace, bool) {
		if pid != child.Process.Pid {
			return Namespace{}, false
		}
		// The reader exits and is reaped: its pid is free for another.
		child.Process.Kill()
		child.Wait()
		found = true
		return a, true
	}})
	if _, _, errno := gone.resolve(child.Process.Pid); errno != syscall.ENOENT || !found {
		t.Errorf("a reader gone during the lookup: %v (looked up: %v)", errno, found)
	}
	if _, _, errno := gone.resolve(child.Process.Pid); !errors.Is(errno, syscall.ENOENT) {
		t.Errorf("a pid no process has: %v", errno)
	}
}

// A second Mount at the same directory (a new daemon's, at a hand-over)
// takes the directory from the first, and the first's Close leaves the
// second's mounted.
func TestMountTakesTheDirectoryOver(t *testing.T) {
	a, b := store(t, "key-of-the-old", 1), store(t, "key-of-the-new", 2)
	none := func(int) (Namespace, bool) { return Namespace{}, false }
	dir, first := mount(t, Config{Lookup: none, Host: &a})
	second, err := Mount(dir, Config{Lookup: none, Host: &b})
	if err != nil {
		t.Fatal(err)
	}
	read := func() string {
		got, err := os.ReadFile(filepath.Join(dir, "keys"))
		if err != nil {
			return err.Error()
		}
		return string(got)
	}
	if got := read(); !strings.Contains(got, "key-of-the-new") {
		t.Fatalf("after the second mount: %q", got)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if got := read(); !strings.Contains(got, "key-of-the-new") {
		t.Errorf("the first closed: %q", got)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if got := read(); !strings.Contains(got, "no such file") {
		t.Errorf("both closed, the directory still shows: %q", got)
	}
}
