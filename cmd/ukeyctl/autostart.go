package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ukeys/ukeys/client"
)

// autostartWait bounds how long ukeyctl waits for a daemon it started to
// answer.
var autostartWait = 10 * time.Second

// connect dials the daemon on its default socket. If nothing answers
// there (no socket, or a stale one) and UKEYS_NO_AUTOSTART is not set, it
// starts ukeyd in the background, waits for it to answer, and says so.
func (a *app) connect() (*client.Client, error) {
	path := client.DefaultSocket()
	cl, err := client.Dial(path)
	if err == nil {
		return cl, nil
	}
	if !daemonAbsent(err) {
		return nil, fmt.Errorf("cannot talk to ukeyd at %s: %v", path, err)
	}
	if v := os.Getenv("UKEYS_NO_AUTOSTART"); v != "" && v != "0" {
		return nil, fmt.Errorf("ukeyd is not running at %s (%v) and UKEYS_NO_AUTOSTART is set", path, strerror(err))
	}
	bin, ferr := findDaemon()
	if ferr != nil {
		return nil, fmt.Errorf("ukeyd is not running at %s (%v), and %v", path, strerror(err), ferr)
	}
	if err := spawnDaemon(bin, path); err != nil {
		return nil, fmt.Errorf("cannot start %s: %v", bin, err)
	}
	deadline := time.Now().Add(autostartWait)
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		cl, err = client.Dial(path)
		if err == nil {
			a.eprintf("ukeyctl: started ukeyd on %s\n", path)
			return cl, nil
		}
		if !daemonAbsent(err) || time.Now().After(deadline) {
			return nil, fmt.Errorf("started %s, but it does not answer at %s: %v (see %s)", bin, path, err, daemonLog(path))
		}
		time.Sleep(delay)
	}
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

// daemonLog is where an autostarted daemon's log goes: beside its socket.
func daemonLog(socket string) string {
	return filepath.Join(filepath.Dir(socket), "ukeyd.log")
}

// spawnDaemon starts ukeyd on socket in a session of its own, detached
// from this process's terminal and streams, logging beside the socket.
func spawnDaemon(bin, socket string) error {
	dir := filepath.Dir(socket)
	mode := os.FileMode(0o700)
	if os.Geteuid() == 0 {
		mode = 0o755
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	logf, err := os.OpenFile(daemonLog(socket), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		logf, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
	}
	defer logf.Close()
	cmd := exec.Command(bin, "-socket", socket)
	cmd.Env = daemonEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	// The daemon outlives this process; reap it if it dies first.
	go cmd.Wait()
	return nil
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
