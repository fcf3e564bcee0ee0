package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/endpoint"
	"github.com/ukeys/ukeys/ukeystest"
	"github.com/ukeys/ukeys/wire"
)

// These tests play issue 13's first finding with real uids: a victim
// (uid 1000) runs ukeyctl with nothing but TMPDIR to find its daemon, as
// under cron, su or ssh without systemd, while an attacker (uid 1002)
// has been at the default path first.

const (
	victimUID, victimGID     = 1000, 100
	attackerUID, attackerGID = 1002, 300
	// victimSecret is the payload the victim adds; an impostor that
	// receives it has won.
	victimSecret = "victim-secret-payload"
)

// trapEnv makes this test binary an impostor daemon (trapMain) listening
// on the socket the variable names; trapMkdirEnv, if set, is the octal
// mode of the directory it makes for it first.
const (
	trapEnv      = "UKEYCTL_TEST_TRAP"
	trapMkdirEnv = "UKEYCTL_TEST_TRAP_MKDIR"
)

// An init function, not a case of TestMain: it must run before any of
// TestMain's other roles.
func init() {
	if path := os.Getenv(trapEnv); path != "" {
		os.Exit(trapMain(path))
	}
}

// trapMain listens on path as whatever uid it runs as, says "ready",
// answers a hello so that a client that trusts it goes on to send its
// requests, and, once its stdin closes, reports how many connections it
// accepted, how many bytes they carried, and whether victimSecret was
// among them.
func trapMain(path string) int {
	if m := os.Getenv(trapMkdirEnv); m != "" {
		mode, err := strconv.ParseUint(m, 8, 32)
		if err == nil {
			err = os.Mkdir(filepath.Dir(path), 0o700)
		}
		if err == nil {
			err = syscall.Chmod(filepath.Dir(path), uint32(mode))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "trap:", err)
			return 1
		}
	}
	ln, err := net.Listen("unix", path)
	if err == nil {
		err = os.Chmod(path, 0o666)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "trap:", err)
		return 1
	}
	fmt.Println("ready")
	var (
		mu     sync.Mutex
		conns  int
		got    []byte
		wg     sync.WaitGroup
		accept = make(chan struct{})
	)
	go func() {
		defer close(accept)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns++
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 64<<10)
				hello := false
				for {
					// A victim that trusts the trap waits for answers
					// it never gets; a second of silence ends it.
					c.SetReadDeadline(time.Now().Add(time.Second))
					n, err := c.Read(buf)
					mu.Lock()
					got = append(got, buf[:n]...)
					mu.Unlock()
					if n > 0 && !hello {
						hello = true
						wire.WriteFrame(c, wire.EncodeHello(wire.Version))
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	io.Copy(io.Discard, os.Stdin)
	ln.Close()
	<-accept
	wg.Wait()
	fmt.Printf("%d %d %t\n", conns, len(got), bytes.Contains(got, []byte(victimSecret)))
	return 0
}

// trustWorld is a temporary directory shared by all users, as /tmp is,
// and a copy of this test binary every uid may run as ukeyctl, with
// ukeyd beside it so that autostart can happen.
type trustWorld struct {
	shared string
	bin    string
}

func newTrustWorld(t *testing.T) *trustWorld {
	t.Helper()
	ukeystest.NeedRoot(t, "the test acts as other uids (a victim 1000 and an attacker 1002)")
	w := &trustWorld{}
	var err error
	if w.shared, err = os.MkdirTemp("", "ukeys-trust-"); err != nil {
		t.Fatal(err)
	}
	if w.bin, err = os.MkdirTemp("", "ukeys-trust-bin-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		killDaemons(w.shared)
		os.RemoveAll(w.shared)
		os.RemoveAll(w.bin)
	})
	if err := os.Chmod(w.shared, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(w.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy, not a link: ukeyctl looks for ukeyd beside its own
	// executable, which a link would resolve to the go test cache.
	ukeystest.CopyExecutable(t, exe, filepath.Join(w.bin, "ukeyctl"))
	if err := os.Symlink("ukeyctl", filepath.Join(w.bin, "ukeyd")); err != nil {
		t.Fatal(err)
	}
	return w
}

// killDaemons stops every daemon that autostart left under dir (each
// writes its pid beside its socket) and waits for it to go.
func killDaemons(dir string) {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".sock.pid") {
			return nil
		}
		b, _ := os.ReadFile(p)
		pid, _ := strconv.Atoi(string(b))
		if pid <= 0 {
			return nil
		}
		syscall.Kill(pid, syscall.SIGTERM)
		for i := 0; i < 500 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	})
}

// victim runs ukeyctl as uid 1000 with only TMPDIR (and env) to find its
// daemon: no XDG_RUNTIME_DIR, UKEYS_SOCKET or UKEYS_NO_AUTOSTART.
func (w *trustWorld) victim(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(w.bin, "ukeyctl"), args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/", "TMPDIR=" + w.shared, "GORACE=atexit_sleep_ms=0",
		endpoint.SystemSocketEnv + "=" + noSystemDaemon}, env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = ukeystest.As(victimUID, victimGID)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		t.Fatalf("ukeyctl %v: %v", args, err)
	}
	return r
}

// noSystemDaemon is where the victim looks for a system daemon: nowhere,
// whatever runs on the host.
const noSystemDaemon = "/nonexistent-ukeys-system/ukeyd.sock"

// trap is an impostor daemon run as the attacker.
type trap struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	errb bytes.Buffer
}

// trapReport is what a trap received.
type trapReport struct {
	conns, bytes int
	secret       bool
}

// startTrap runs an impostor as the attacker on path, making its
// directory with mode mkdir first unless mkdir is "".
func (w *trustWorld) startTrap(t *testing.T, path, mkdir string) *trap {
	t.Helper()
	tr := &trap{cmd: exec.Command(filepath.Join(w.bin, "ukeyctl"))}
	tr.cmd.Env = []string{trapEnv + "=" + path, trapMkdirEnv + "=" + mkdir, "GORACE=atexit_sleep_ms=0"}
	tr.cmd.Dir = "/"
	tr.cmd.SysProcAttr = ukeystest.As(attackerUID, attackerGID)
	tr.cmd.Stderr = &tr.errb
	var err error
	if tr.in, err = tr.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := tr.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	tr.out = bufio.NewReader(stdout)
	if err := tr.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.in.Close(); tr.cmd.Process.Kill(); tr.cmd.Wait() })
	if line, err := tr.out.ReadString('\n'); line != "ready\n" {
		tr.in.Close()
		tr.cmd.Wait()
		t.Fatalf("trap: %q %v %s", line, err, tr.errb.String())
	}
	return tr
}

// report stops the trap and says what it received.
func (tr *trap) report(t *testing.T) trapReport {
	t.Helper()
	tr.in.Close()
	line, err := tr.out.ReadString('\n')
	var r trapReport
	if _, serr := fmt.Sscanf(line, "%d %d %t", &r.conns, &r.bytes, &r.secret); serr != nil {
		t.Fatalf("trap report %q: %v %v %s", line, err, serr, tr.errb.String())
	}
	tr.cmd.Wait()
	return r
}

// wantRefusal checks that ukeyctl failed, saying it refused path and why.
func wantRefusal(t *testing.T, r result, path, reason string) {
	t.Helper()
	want := "ukeyctl: refusing to use ukeyd at " + path + ": " + reason + "\n" +
		"ukeyctl: another user may be impersonating ukeyd there: nothing was sent to it and no daemon was started; " +
		"use a directory of your own (set XDG_RUNTIME_DIR or UKEYS_SOCKET)\n"
	if r.Code != 1 || r.Stdout != "" || r.Stderr != want {
		t.Errorf("ukeyctl: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and stderr:\n%s", r.Code, r.Stdout, r.Stderr, want)
	}
}

// wantEmpty checks that nothing (no socket, log or pid file of an
// autostarted daemon) appeared in dir.
func wantEmpty(t *testing.T, dir string, except ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !slices.Contains(except, e.Name()) {
			t.Errorf("%s appeared in %s: autostart ran there", e.Name(), dir)
		}
	}
}

// wantServedPrivately checks that the victim, whose default directory
// another user holds, was served all the same by a daemon of its own in
// its private directory beside it (ukeys-1000.XXXXXXXX: the victim's,
// 0700), the same one every time: it adds a key and reads it back.
func (w *trustWorld) wantServedPrivately(t *testing.T) {
	t.Helper()
	r := w.victim(t, nil, "add", "user", "k", victimSecret, "@u")
	if r.Code != 0 {
		t.Fatalf("the victim's add, its default directory taken: %+v", r)
	}
	r = w.victim(t, nil, "print", strings.TrimSpace(r.Stdout))
	if r.Code != 0 || r.Stdout != victimSecret+"\n" || r.Stderr != "" {
		t.Fatalf("the victim's print, its default directory taken: %+v", r)
	}
	dirs, _ := filepath.Glob(filepath.Join(w.shared, "ukeys-1000.*"))
	if len(dirs) != 1 {
		t.Fatalf("the victim's private directories: %q, want one", dirs)
	}
	st, err := os.Lstat(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode() != os.ModeDir|0o700 || st.Sys().(*syscall.Stat_t).Uid != victimUID {
		t.Errorf("%s: mode %v, uid %d; want %v, uid %d", dirs[0], st.Mode(), st.Sys().(*syscall.Stat_t).Uid, os.ModeDir|0o700, victimUID)
	}
	if _, err := os.Stat(filepath.Join(dirs[0], "ukeyd.sock.pid")); err != nil {
		t.Errorf("no daemon of the victim's in %s: %v", dirs[0], err)
	}
}

// The attacker makes the victim's default directory first and listens
// in it (issue 33, finding 14: where there is no XDG_RUNTIME_DIR, as
// under cron, su or ssh without pam_systemd, another user's mkdir of
// /tmp/ukeys-UID left UID with no key service until root removed it).
// The victim never sends the attacker anything, its hello and its payload
// included, and starts no daemon there: it is served by a daemon of its
// own in a private directory beside it, which its later commands find.
func TestTrustSquattedDirectory(t *testing.T) {
	w := newTrustWorld(t)
	dir := filepath.Join(w.shared, "ukeys-1000")
	sock := filepath.Join(dir, "ukeyd.sock")
	tr := w.startTrap(t, sock, "755")
	w.wantServedPrivately(t)
	if r := tr.report(t); r.conns != 0 || r.bytes != 0 || r.secret {
		t.Errorf("the attacker's socket took %d connections and received %d bytes (the secret among them: %t)", r.conns, r.bytes, r.secret)
	}
	wantEmpty(t, dir, "ukeyd.sock")

	// The same directory without a socket, and open to all: where an
	// absent daemon would be started, none is; the victim's own serves on.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, attackerUID, attackerGID); err != nil {
		t.Fatal(err)
	}
	w.wantServedPrivately(t)
	wantEmpty(t, dir)
	// A decoy beside it, named as the victim's private directories are
	// but the attacker's, is never taken for one.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	decoy := filepath.Join(w.shared, "ukeys-1000.0")
	if err := os.Mkdir(decoy, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(decoy, attackerUID, attackerGID); err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join(w.shared, "ukeys-1000.*"))
	r := w.victim(t, nil, "print", "%user:k")
	if r.Code != 0 || r.Stdout != victimSecret+"\n" {
		t.Errorf("with the default directory free again and a decoy: %+v", r)
	}
	wantEmpty(t, decoy)
	if len(dirs) != 2 {
		t.Errorf("directories %q", dirs)
	}
}

// A directory that passes (root's, 0755) but a socket served by the
// attacker, who bound it while the directory was open: the daemon's
// credentials give it away, before anything is sent.
func TestTrustPeerCredentials(t *testing.T) {
	w := newTrustWorld(t)
	dir := filepath.Join(w.shared, "ukeys-1000")
	sock := filepath.Join(dir, "ukeyd.sock")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	tr := w.startTrap(t, sock, "")
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	reason := "the daemon answering there runs as uid 1002, not as you (uid 1000) or root"
	wantRefusal(t, w.victim(t, nil, "add", "user", "k", victimSecret, "@s"), sock, reason)
	wantRefusal(t, w.victim(t, nil, "print", "%user:k"), sock, reason)
	if r := tr.report(t); r.bytes != 0 || r.secret {
		t.Errorf("the attacker's daemon received %d bytes (the secret among them: %t)", r.bytes, r.secret)
	}
}

// The victim's default directory is the attacker's link to a directory
// of the victim's: followed, it would pass every test of ownership, and
// the victim's daemon would run (and log) where the attacker chose. It
// runs in the victim's private directory instead.
func TestTrustSymlinkedDirectory(t *testing.T) {
	w := newTrustWorld(t)
	own := filepath.Join(w.shared, "victims-own")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, victimUID, victimGID); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(w.shared, "ukeys-1000")
	if err := os.Symlink(own, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, attackerUID, attackerGID); err != nil {
		t.Fatal(err)
	}
	w.wantServedPrivately(t)
	wantEmpty(t, own)
}

// A ukeyd.log planted as a link to a file the victim can write: the
// daemon autostart runs must not append to it, whether the link sits in
// the attacker's directory or in the victim's own.
func TestTrustPlantedLog(t *testing.T) {
	w := newTrustWorld(t)
	dir := filepath.Join(w.shared, "ukeys-1000")
	target := filepath.Join(w.shared, "victims-file")
	const precious = "the victim's own content\n"
	plant := func(t *testing.T, dirUID, dirGID int, mode os.FileMode) {
		t.Helper()
		os.RemoveAll(dir)
		if err := os.WriteFile(target, []byte(precious), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(target, victimUID, victimGID); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		log := filepath.Join(dir, "ukeyd.log")
		if err := os.Symlink(target, log); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{log, dir} {
			if err := os.Lchown(p, dirUID, dirGID); err != nil {
				t.Fatal(err)
			}
		}
	}
	unchanged := func(t *testing.T) {
		t.Helper()
		if b, err := os.ReadFile(target); err != nil || string(b) != precious {
			t.Errorf("the link's target now holds %q (%v)", b, err)
		}
	}

	t.Run("attacker's directory", func(t *testing.T) {
		plant(t, attackerUID, attackerGID, 0o777)
		w.wantServedPrivately(t)
		unchanged(t)
		wantEmpty(t, dir, "ukeyd.log")
	})
	t.Run("victim's directory", func(t *testing.T) {
		plant(t, victimUID, victimGID, 0o700)
		r := w.victim(t, nil, "add", "user", "k", victimSecret, "@s")
		want := "ukeyctl: cannot start " + filepath.Join(w.bin, "ukeyd") + ": refusing to write ukeyd's log to " +
			filepath.Join(dir, "ukeyd.log") + ": it is a symbolic link\n"
		if r.Code != 1 || r.Stderr != want {
			t.Errorf("exit %d, stderr %q; want exit 1, stderr %q", r.Code, r.Stderr, want)
		}
		unchanged(t)
		wantEmpty(t, dir, "ukeyd.log")
	})
}

// What must keep working: the victim's own daemon, which autostart makes
// in a 0700 directory of the victim's, and a root daemon in a root 0755
// directory.
func TestTrustGoodDaemons(t *testing.T) {
	w := newTrustWorld(t)
	t.Run("own", func(t *testing.T) {
		dir := filepath.Join(w.shared, "ukeys-1000")
		sock := filepath.Join(dir, "ukeyd.sock")
		r := w.victim(t, nil, "id", "@u")
		pid, _ := os.ReadFile(sock + ".pid")
		want := "ukeyctl: started ukeyd (pid " + string(pid) + ") on " + sock + "; its log is " + filepath.Join(dir, "ukeyd.log") + "\n" +
			"ukeyctl: it serves uid 1000 only; a ukeyd run by root (on " + noSystemDaemon + ") would serve every user of the host in one store\n"
		if r.Code != 0 || r.Stderr != want {
			t.Fatalf("first command: %+v\nwant on stderr:\n%s", r, want)
		}
		r2 := w.victim(t, nil, "id", "@u")
		if r2.Code != 0 || r2.Stderr != "" || r2.Stdout != r.Stdout {
			t.Fatalf("second command: %+v (first printed %q)", r2, r.Stdout)
		}
		for _, c := range []struct {
			path string
			mode os.FileMode
		}{{dir, os.ModeDir | 0o700}, {filepath.Join(dir, "ukeyd.log"), 0o600}} {
			st, err := os.Lstat(c.path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode() != c.mode || st.Sys().(*syscall.Stat_t).Uid != victimUID {
				t.Errorf("%s: mode %v, uid %d; want %v, uid %d", c.path, st.Mode(), st.Sys().(*syscall.Stat_t).Uid, c.mode, victimUID)
			}
		}
		if b, err := os.ReadFile(filepath.Join(dir, "ukeyd.log")); err != nil || !strings.Contains(string(b), "starting on "+sock) {
			t.Errorf("the daemon's log: %q, %v", b, err)
		}
	})
	t.Run("root", func(t *testing.T) {
		top := filepath.Join(w.shared, "rootd")
		if err := os.Mkdir(top, 0o755); err != nil {
			t.Fatal(err)
		}
		d := &daemon{dir: top, path: filepath.Join(top, "run", "ukeyd.sock"), done: make(chan error, 1)}
		d.start(t)
		env := []string{"UKEYS_SOCKET=" + d.path, "UKEYS_NO_AUTOSTART=1"}
		r := w.victim(t, env, "add", "user", "k", victimSecret, "@u")
		if r.Code != 0 || r.Stderr != "" {
			t.Fatalf("add: %+v", r)
		}
		r = w.victim(t, env, "print", strings.TrimSpace(r.Stdout))
		if r.Code != 0 || r.Stdout != victimSecret+"\n" {
			t.Fatalf("print: %+v", r)
		}
	})
}

// The directory autostart uses: made if missing, refused if it is a
// link, not a directory, someone else's or writable by others.
func TestOpenDaemonDir(t *testing.T) {
	base := t.TempDir()
	me := os.Geteuid()
	fresh := filepath.Join(base, "a", "fresh")
	f, err := openDaemonDir(fresh)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	want := os.ModeDir | 0o700
	if me == 0 {
		want = os.ModeDir | 0o755
	}
	if st, err := os.Lstat(fresh); err != nil || st.Mode() != want {
		t.Fatalf("made %v (%v), want %v", st.Mode(), err, want)
	}
	if f, err := openDaemonDir(fresh); err != nil {
		t.Fatalf("again: %v", err)
	} else {
		f.Close()
	}

	link := filepath.Join(base, "link")
	if err := os.Symlink(fresh, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	sticky := filepath.Join(base, "sticky")
	if err := os.Mkdir(sticky, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sticky, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ dir, want string }{
		{link, "refusing to start ukeyd in " + link + ": it is a symbolic link"},
		{file, "refusing to start ukeyd in " + file + ": it is not a directory"},
		{open, "refusing to start ukeyd in " + open + ": it is writable by other users (mode 0777)"},
		{sticky, ""},
	}
	if me == 0 {
		others := filepath.Join(base, "others")
		if err := os.Mkdir(others, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(others, attackerUID, attackerGID); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ dir, want string }{others, "refusing to start ukeyd in " + others + ": it belongs to uid 1002, not to you (uid 0) or root"})
	}
	for _, c := range cases {
		f, err := openDaemonDir(c.dir)
		if f != nil {
			f.Close()
		}
		if got := fmt.Sprint(err); c.want == "" && err != nil || c.want != "" && got != c.want {
			t.Errorf("%s: %v, want %q", c.dir, err, c.want)
		}
	}
}

// The daemon's log: created 0600, appended to, and refused if it is a
// link, a FIFO (which must not block the open), a second name of another
// file, or someone else's.
func TestOpenDaemonLog(t *testing.T) {
	check := func(t *testing.T, prepare func(dir, log string), want string) {
		t.Helper()
		dir := t.TempDir()
		log := filepath.Join(dir, "ukeyd.log")
		prepare(dir, log)
		d, err := openDaemonDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		f, err := openDaemonLog(d)
		if want == "" {
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString("line\n"); err != nil {
				t.Fatal(err)
			}
			return
		}
		if f != nil {
			f.Close()
		}
		if want = strings.ReplaceAll(want, "LOG", log); fmt.Sprint(err) != want {
			t.Fatalf("got %v, want %q", err, want)
		}
	}
	t.Run("new", func(t *testing.T) {
		check(t, func(string, string) {}, "")
	})
	t.Run("existing", func(t *testing.T) {
		check(t, func(_, log string) { os.WriteFile(log, []byte("before\n"), 0o600) }, "")
	})
	t.Run("symlink", func(t *testing.T) {
		target := filepath.Join(t.TempDir(), "target")
		check(t, func(_, log string) {
			os.WriteFile(target, nil, 0o600)
			os.Symlink(target, log)
		}, "refusing to write ukeyd's log to LOG: it is a symbolic link")
		if b, _ := os.ReadFile(target); len(b) != 0 {
			t.Errorf("the link's target got %q", b)
		}
	})
	t.Run("fifo", func(t *testing.T) {
		check(t, func(_, log string) { syscall.Mkfifo(log, 0o600) }, "refusing to write ukeyd's log to LOG: it is not a regular file")
	})
	t.Run("hard link", func(t *testing.T) {
		check(t, func(dir, log string) {
			os.WriteFile(filepath.Join(dir, "other"), nil, 0o600)
			os.Link(filepath.Join(dir, "other"), log)
		}, "refusing to write ukeyd's log to LOG: it has 2 hard links")
	})
	t.Run("another's", func(t *testing.T) {
		ukeystest.NeedRoot(t, "the test makes a file of another uid")
		check(t, func(_, log string) {
			os.WriteFile(log, nil, 0o666)
			os.Chown(log, attackerUID, attackerGID)
		}, "refusing to write ukeyd's log to LOG: it belongs to uid 1002, not to you (uid 0)")
	})
}
