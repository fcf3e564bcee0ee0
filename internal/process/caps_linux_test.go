package process

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/ukeys/ukeys/internal/procfs"
)

// capget reads what /proc/<pid>/status shows as CapEff: for the test
// process and, as root, for a child that runs as another uid with no
// capabilities at all.
func TestCapgetIsStatusCapEff(t *testing.T) {
	pids := []int{os.Getpid()}
	if os.Geteuid() == 0 {
		cmd := exec.Command("sleep", "30")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		pids = append(pids, cmd.Process.Pid)
	} else {
		t.Log("not root: the child with no capabilities is not tried")
	}
	for i, pid := range pids {
		eff, ok := capget(pid)
		st, sok := procfs.ReadStatus(pid)
		if !ok || !sok || !st.HasCapEff || eff != st.CapEff {
			t.Errorf("pid %d: capget %#x (%v), status %#x (%v)", pid, eff, ok, st.CapEff, sok)
		}
		if i == 1 && eff != 0 {
			t.Errorf("a child as uid 65534 has capabilities %#x", eff)
		}
	}
	if _, ok := capget(1 << 30); ok {
		t.Error("capget of a pid that cannot exist succeeded")
	}
}
