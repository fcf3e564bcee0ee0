package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keyctl"
)

// keepalive is how often a process that holds a session for its children
// talks to the daemon, which closes connections that stay silent for
// long (5 minutes by default).
var keepalive = time.Minute

func (a *app) cmdSession(args []string) {
	args = args[1:]
	var name *string
	if len(args) != 0 {
		if p := args[0]; p != "-" {
			name = &p
		}
		args = args[1:]
	}
	id, err := a.c().JoinSessionKeyring(name)
	if err != nil {
		a.fail("keyctl_join_session_keyring", err)
	}
	a.eprintf("Joined session keyring: %d\n", id)
	if len(args) == 0 {
		sh := os.Getenv("SHELL")
		if sh == "" {
			sh = "/bin/sh"
		}
		a.exit(a.runInSession(sh, []string{sh}))
	}
	a.exit(a.runInSession(args[0], args))
}

// execProgram replaces the process with a program, as execve does. The
// real command sets it; in-process callers (tests) leave it nil, and the
// program then runs as a child instead.
var execProgram func(path string, argv, env []string) error

// runInSession runs a program as keyctl session does, with the session
// keyring's token in its environment: it replaces ukeyctl with the
// program (execProgram). The daemon keeps a process's keyrings until the
// process exits, and the program is the same process, so the session
// lives as long as the program, as with the kernel. Without execProgram
// it waits for the program as a child, forwards SIGTERM and SIGHUP to it,
// and exits with its status (128+n if it died of signal n).
func (a *app) runInSession(prog string, argv []string) int {
	tok, err := a.c().SessionToken()
	if err != nil {
		a.fail("ukeyctl: session token", err)
	}
	path := prog
	if !strings.Contains(prog, "/") {
		p, err := exec.LookPath(prog)
		if err != nil {
			a.fail(prog, keyctl.ENOENT)
		}
		path = p
	}
	env := withEnv(os.Environ(), client.SessionEnv, tok)
	a.out.Flush()
	if execProgram != nil {
		a.cl.Close()
		a.cl = nil
		err := execProgram(path, argv, env)
		a.fail(prog, err) // only on failure, as execvp
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Stdin: a.stdin, Stdout: a.rawOut, Stderr: a.stderr}
	return a.runChild(cmd, prog, nil)
}

// runChild starts cmd (failing like execvp with msg), keeps the daemon
// connection alive while it runs and returns its exit status. Once stop
// is closed (if it is not nil), the program gets a SIGTERM.
func (a *app) runChild(cmd *exec.Cmd, msg string, stop <-chan struct{}) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		a.fail(msg, err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(keepalive)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-stop:
				cmd.Process.Signal(syscall.SIGTERM)
				stop = nil
			case <-tick.C:
				a.cl.GetKeyringID(keyctl.SessionKeyring, false)
			case s := <-sigs:
				// SIGINT and SIGQUIT from the terminal reach the child
				// too: only the others are passed on.
				if s == syscall.SIGTERM || s == syscall.SIGHUP {
					cmd.Process.Signal(s)
				}
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	wg.Wait()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	a.fail(msg, err)
	return 1
}

// withEnv returns env with name set to value.
func withEnv(env []string, name, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return append(out, name+"="+value)
}

func (a *app) cmdNewSession(args []string) {
	if len(args) != 1 && len(args) != 2 {
		a.format()
	}
	var name *string
	if len(args) == 2 {
		name = &args[1]
	}
	if _, err := a.c().JoinSessionKeyring(name); err != nil {
		a.fail("keyctl_join_session_keyring", err)
	}
	if err := a.c().SessionToParent(); err != nil {
		a.fail("keyctl_session_to_parent", err)
	}
	id, err := a.c().GetKeyringID(keyctl.SessionKeyring, false)
	if err != nil {
		a.fail("keyctl_get_keyring_ID", err)
	}
	a.printf("%d\n", id)
}
