package main

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// commandBound is how long a scenario's whole session may run: they take
// seconds. One that hangs (a call that never returns) is killed with its
// process group and reported with what it printed, instead of holding the
// test binary until go test's own timeout dumps every goroutine.
const commandBound = 2 * time.Minute

// boundedExec is an exec.Cmd run in a process group of its own, killed
// whole once commandBound has passed.
type boundedExec struct {
	*exec.Cmd
	ctx context.Context
}

// hung reports whether the command was killed for running too long.
func (b boundedExec) hung() bool { return b.ctx.Err() != nil }

func boundedCommand(t *testing.T, name string, args ...string) boundedExec {
	ctx, cancel := context.WithTimeout(context.Background(), commandBound)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return boundedExec{Cmd: cmd, ctx: ctx}
}
