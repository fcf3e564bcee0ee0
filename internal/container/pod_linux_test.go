package container

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/process"
)

// openNS returns a descriptor of process pid's namespace of kind.
func openNS(t *testing.T, pid int, kind string) int {
	t.Helper()
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/"+kind, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// A pod's record, with the descriptor that pinned it, binds the next
// daemon to the same pod: the same namespaces, Same as the pod a
// container in them reads (PodOf). A descriptor of another kind, or of
// another namespace than the record names, or of the daemon's own, is
// refused.
func TestRebindPod(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to give a process an IPC namespace of its own")
	}
	cmd := exec.Command("unshare", "--ipc", "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("needs unshare (util-linux): %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	h := process.Open(nil, cmd.Process.Pid)
	defer h.Close()
	var pod Pod
	for range 100 {
		var err error
		if pod, err = PodOf(&h); err == nil && pod.Shared() {
			break
		}
		pod.Close()
		time.Sleep(50 * time.Millisecond) // until unshare has made it
	}
	if !pod.Shared() {
		t.Fatal("the process never had an IPC namespace of its own")
	}
	defer pod.Close()
	rec, pin := pod.Record()
	if pin < 0 || rec.Pinned != "ipc" {
		t.Fatalf("record %+v, pin %d", rec, pin)
	}
	dup := func() int {
		fd, err := unix.FcntlInt(uintptr(pin), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	again, err := RebindPod(rec, dup())
	if err != nil {
		t.Fatal(err)
	}
	if !again.Same(pod) || !again.Shared() {
		t.Fatalf("rebound %+v, was %+v", again, pod)
	}
	again.Close()

	bad := map[string]struct {
		rec PodRecord
		fd  int
	}{
		"the network namespace for the IPC one": {rec, openNS(t, cmd.Process.Pid, "net")},
		"the daemon's own IPC namespace":        {rec, openNS(t, os.Getpid(), "ipc")},
		"another IPC namespace than the record": {PodRecord{IPCDev: rec.IPCDev, IPCIno: rec.IPCIno + 1, NetDev: rec.NetDev, NetIno: rec.NetIno, Pinned: "ipc"}, dup()},
		"no kind pinned":                        {PodRecord{IPCDev: rec.IPCDev, IPCIno: rec.IPCIno, NetDev: rec.NetDev, NetIno: rec.NetIno}, dup()},
		"a file, no namespace":                  {rec, openNS(t, os.Getpid(), "../status")},
		"no descriptor":                         {rec, -1},
	}
	for name, c := range bad {
		if p, err := RebindPod(c.rec, c.fd); err == nil {
			p.Close()
			t.Errorf("%s: accepted", name)
		}
	}
	// The daemon's own IPC namespace named as the pod's, the network one
	// pinned: the record says the IPC one is the daemon's, and a
	// daemon elsewhere refuses it.
	own := PodRecord{IPCDev: rec.IPCDev, IPCIno: rec.IPCIno, NetDev: rec.NetDev, NetIno: rec.NetIno, Pinned: "net"}
	if p, err := RebindPod(own, openNS(t, cmd.Process.Pid, "net")); err == nil {
		p.Close()
		t.Error("a pod pinned by its network namespace whose IPC one is not the daemon's: accepted")
	}
}
