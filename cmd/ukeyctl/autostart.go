package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/endpoint"
	"github.com/ukeys/ukeys/keyctl"
)

// autostartWait bounds how long ukeyctl waits for a daemon it started to
// answer.
var autostartWait = 10 * time.Second

// dialOpts: ukeyctl is a process per command that calls from one
// goroutine at a time, which blocking reads serve with fewer hand-offs
// (client.WithBlockingIO); a command that calls in a loop (`--test`)
// meets its answers polling (client.WithSpin).
var dialOpts = []client.Option{client.WithBlockingIO(), client.WithDeferredHandshake(), client.WithSpin(client.DefaultSpin)}

// connect dials the daemon on its default socket. If nothing answers
// there (no socket, or a stale one) and UKEYS_NO_AUTOSTART is not set, it
// starts ukeyd in the background, waits for it to answer, and says so.
func (a *app) connect() (*client.Client, error) { return a.dialDaemon(true) }

// dialDaemon is connect; rechoose lets it follow, once, the user's
// private directory that another ukeyctl chose at the same moment.
func (a *app) dialDaemon(rechoose bool) (*client.Client, error) {
	path := client.DefaultSocket()
	a.path = path
	cl, err := client.Dial(path, dialOpts...)
	if err == nil {
		return cl, nil
	}
	if ue := (*client.UntrustedError)(nil); errors.As(err, &ue) {
		// Never a reason to start a daemon: one started there would
		// serve in a place another user controls.
		return nil, fmt.Errorf("refusing to use ukeyd at %s: %s\n"+
			"ukeyctl: another user may be impersonating ukeyd there: nothing was sent to it and no daemon was started; "+
			"use a directory of your own (set XDG_RUNTIME_DIR or UKEYS_SOCKET)", ue.Path, ue.Reason)
	}
	if he := (*client.HandshakeError)(nil); errors.As(err, &he) || !daemonAbsent(err) {
		return nil, handshakeFailure(path, err)
	}
	if path == endpoint.System() && os.Getenv(endpoint.SocketEnv) == "" && os.Geteuid() != 0 {
		// The system daemon's socket is there but nobody answers: this
		// user's own daemon, if one runs, or one started now.
		path = endpoint.User()
		a.path = path
		if cl, err = client.Dial(path, dialOpts...); err == nil {
			return cl, nil
		}
		if !daemonAbsent(err) {
			return nil, handshakeFailure(path, err)
		}
	}
	if v := os.Getenv("UKEYS_NO_AUTOSTART"); v != "" && v != "0" {
		return nil, fmt.Errorf("ukeyd is not running at %s (%v) and UKEYS_NO_AUTOSTART is set", path, strerror(err))
	}
	bin, ferr := findDaemon()
	if ferr != nil {
		return nil, fmt.Errorf("ukeyd is not running at %s (%v), and %v", path, strerror(err), ferr)
	}
	pid, err := spawnDaemon(bin, path)
	if err != nil {
		return nil, fmt.Errorf("cannot start %s: %v", bin, err)
	}
	deadline := time.Now().Add(autostartWait)
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		cl, err = client.Dial(path, dialOpts...)
		if err == nil {
			if answered, ok := daemonPID(cl); ok && answered != pid {
				// Another ukeyctl started one at the same moment, and says
				// so; this one's found the socket taken and has exited.
				return cl, nil
			}
			if rechoose && os.Getenv(endpoint.SocketEnv) == "" && path != endpoint.System() && endpoint.User() != path {
				// Where another user took the user's directory, another
				// ukeyctl of this user made a private one at the same
				// moment, which every later command takes (endpoint.User):
				// so does this one, and the daemon started here goes.
				cl.Close()
				syscall.Kill(pid, syscall.SIGTERM)
				return a.dialDaemon(false)
			}
			a.eprintf("ukeyctl: started ukeyd (pid %d) on %s; its log is %s\n", pid, path, daemonLog(path))
			if os.Geteuid() != 0 {
				a.eprintf("ukeyctl: it serves uid %d only; a ukeyd run by root (on %s) would serve every user of the host in one store\n",
					os.Geteuid(), endpoint.System())
			} else {
				a.eprintf("ukeyctl: it serves every user of the host\n")
			}
			return cl, nil
		}
		if !daemonAbsent(err) || time.Now().After(deadline) {
			return nil, fmt.Errorf("started %s, but it does not answer at %s: %v (see %s)", bin, path, err, daemonLog(path))
		}
		time.Sleep(delay)
	}
}

// handshakeFailure says why the daemon at path did not take up a
// connection that reached it: err is Dial's error, or the first call's
// (client.HandshakeError) when the handshake was deferred to it.
func handshakeFailure(path string, err error) error {
	if ce := (*client.Error)(nil); errors.As(err, &ce) && ce.Op == "connect" {
		// The daemon answered, and refused this process.
		why := "it is full"
		if ce.Errno == keyctl.EDQUOT {
			why = "your uid holds its share of its connections and client processes already"
		}
		return fmt.Errorf("ukeyd at %s refuses this process: %s (%v)", path, why, ce.Errno)
	}
	return fmt.Errorf("cannot talk to ukeyd at %s: %v", path, err)
}

// daemonPID asks the daemon cl talks to for its pid (`ukeyctl status`).
func daemonPID(cl *client.Client) (int, bool) {
	st, err := cl.Status()
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(st) {
		if v, ok := strings.CutPrefix(line, "pid: "); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			return pid, err == nil
		}
	}
	return 0, false
}

// daemonAbsent reports a dial failure that means no daemon listens.
func daemonAbsent(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// findDaemon looks for ukeyd next to this program, then in $PATH.
func findDaemon() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "ukeyd")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath("ukeyd"); err == nil {
		return p, nil
	}
	return "", errors.New("no ukeyd found next to ukeyctl or in $PATH to start")
}

// logName is the autostarted daemon's log, beside its socket.
const logName = "ukeyd.log"

// daemonLog is where an autostarted daemon's log goes: beside its socket.
func daemonLog(socket string) string {
	return filepath.Join(filepath.Dir(socket), logName)
}

// spawnDaemon starts ukeyd on socket in a session of its own, detached
// from this process's terminal and streams, logging beside the socket,
// and returns its pid.
func spawnDaemon(bin, socket string) (int, error) {
	dir, err := openDaemonDir(filepath.Dir(socket))
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	logf, err := openDaemonLog(dir)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "-socket", socket)
	cmd.Env = daemonEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	// The daemon outlives this process; reap it if it dies first.
	go cmd.Wait()
	return cmd.Process.Pid, nil
}

// openDaemonDir makes the daemon's directory if it does not exist and
// opens it without following a link. Whatever is there must be a real
// directory that belongs to this user or root and that no one else may
// write (unless sticky, as /tmp is): another user who made it first, or
// planted a link in its place, would otherwise choose where the log goes
// and who else may bind the socket.
func openDaemonDir(dir string) (*os.File, error) {
	mode := uint32(0o700)
	if os.Geteuid() == 0 {
		mode = 0o755
	}
	if err := os.MkdirAll(filepath.Dir(dir), os.FileMode(mode)); err != nil {
		return nil, err
	}
	// mkdir never follows a link in the last component: a planted one
	// makes it fail with EEXIST, and the open below refuses it.
	if err := syscall.Mkdir(dir, mode); err != nil && err != syscall.EEXIST {
		return nil, &os.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ELOOP || err == unix.ENOTDIR {
		what := "not a directory"
		if st, lerr := os.Lstat(dir); lerr == nil && st.Mode()&os.ModeSymlink != 0 {
			what = "a symbolic link"
		}
		return nil, fmt.Errorf("refusing to start ukeyd in %s: it is %s", dir, what)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "fstat", Path: dir, Err: err}
	}
	euid := os.Geteuid()
	switch {
	case int(st.Uid) != euid && st.Uid != 0:
		err = fmt.Errorf("refusing to start ukeyd in %s: it belongs to uid %d, not to you (uid %d) or root", dir, st.Uid, euid)
	case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
		err = fmt.Errorf("refusing to start ukeyd in %s: it is writable by other users (mode %#o)", dir, st.Mode&0o7777)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openDaemonLog opens (creating it if need be) ukeyd.log in dir for
// appending, without following a link and without blocking on a FIFO,
// and only if it is a regular file of this user's with no other name: a
// link or a second hard link would make the daemon's output land in a
// file someone else chose.
func openDaemonLog(dir *os.File) (*os.File, error) {
	path := filepath.Join(dir.Name(), logName)
	fd, err := unix.Openat(int(dir.Fd()), logName,
		unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	switch err {
	case unix.ELOOP:
		return nil, fmt.Errorf("refusing to write ukeyd's log to %s: it is a symbolic link", path)
	case unix.ENXIO: // a FIFO or socket with no one at the other end
		return nil, fmt.Errorf("refusing to write ukeyd's log to %s: it is not a regular file", path)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open ukeyd's log: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("refusing to write ukeyd's log to %s: it is not a regular file", path)
	case int(st.Uid) != os.Geteuid():
		err = fmt.Errorf("refusing to write ukeyd's log to %s: it belongs to uid %d, not to you (uid %d)", path, st.Uid, os.Geteuid())
	case st.Nlink != 1:
		err = fmt.Errorf("refusing to write ukeyd's log to %s: it has %d hard links", path, st.Nlink)
	}
	if err == nil {
		// O_NONBLOCK was for the open alone; the daemon inherits the
		// file's status flags.
		err = unix.SetNonblock(fd, false)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// daemonEnv drops what belongs to this process's session from the
// daemon's environment.
func daemonEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := cutEnv(kv)
		if name == client.SessionEnv || name == client.HelperEnv {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}
