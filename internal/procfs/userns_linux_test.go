package procfs

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// InOwnUserNS tells a task in this process's user namespace from one in
// a namespace of its own, and a task that is gone from both.
func TestInOwnUserNS(t *testing.T) {
	if !Ours() {
		t.Skip("/proc is not this process's")
	}
	if !InOwnUserNS(os.Getpid()) || !InOwnUserNS(syscall.Gettid()) {
		t.Fatal("this process is not in its own user namespace")
	}
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	if err := cmd.Start(); err != nil {
		t.Skipf("no user namespace of its own: %v", err)
	}
	pid := cmd.Process.Pid
	if InOwnUserNS(pid) {
		t.Error("a process in a user namespace of its own is in this one")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if InOwnUserNS(pid) {
		t.Error("a process that is gone is in this user namespace")
	}
}
