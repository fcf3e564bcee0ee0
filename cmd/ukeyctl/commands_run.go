package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/intercept"
)

// cmdRun runs a program whose own add_key, keyctl and request_key system
// calls, and those of everything it starts, ukeyd serves: ukeyctl run
// [--] <program> [<args>...]. It installs a seccomp filter on itself that
// hands those calls to a listener, gives the listener to the daemon, and
// execs the program, which inherits the filter: keyutils' keyctl, or any
// program linked with libkeyutils or making the calls itself, then works
// with ukeys unchanged, and never touches the kernel's keyrings.
func (a *app) cmdRun(args []string) {
	args = args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		a.extraUsage("run")
	}
	if execProgram == nil {
		a.eprintf("ukeyctl run: only as a command of its own (it execs the program)\n")
		a.exit(1)
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		a.fail(args[0], err)
	}
	// The daemon first, so that a daemon autostarted here does not
	// inherit the filter.
	cl := a.c()
	// The filter is per thread, and the program must inherit it: this
	// goroutine installs it and execs from the same thread.
	runtime.LockOSThread()
	fd, err := intercept.Install()
	if err != nil {
		a.eprintf("ukeyctl run: cannot hand the program's key calls to ukeyd: %v\n", err)
		a.exit(1)
	}
	if err := cl.Intercept(fd); err != nil {
		a.eprintf("ukeyctl run: ukeyd does not take the program's key calls: %v\n", err)
		a.exit(1)
	}
	unix.Close(fd)
	a.cl.Close()
	a.cl = nil
	a.out.Flush()
	err = execProgram(path, args, os.Environ())
	a.fail(args[0], err) // only on failure, as execvp
}
