package agent_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/internal/testutil"
)

// NamespaceOf finds the key namespace of each container's own
// processes, none for a host process, and none for a pid whose
// container has ended: a pid is a name that may change hands, and a
// namespace whose init has exited may have given its ids away.
func TestNamespaceOfAProcess(t *testing.T) {
	a, sock := agentTest(t, worldDir(t), agent.Config{})
	a1 := runInContainer(t, sock, "ctr-a", "add", "a-key")
	b1 := runInContainer(t, sock, "ctr-b", "add", "b-key")
	for _, c := range []*container{a1, b1} {
		if got := c.result(t); got != "ok" {
			t.Fatalf("adding a key in a container: %s", got)
		}
	}
	a2 := a1.runAnother(t, sock, "ctr-a", "search", "a-key")
	a2.result(t)
	svcA, srvA, okA := a.NamespaceOf(a1.cmd.Process.Pid)
	svcB, _, okB := a.NamespaceOf(b1.cmd.Process.Pid)
	if !okA || !okB || svcA == svcB || srvA == nil {
		t.Fatalf("containers a and b: %v %v, the same store: %v", okA, okB, svcA == svcB)
	}
	// a2 is nsenter's child (nsenter forks into the pid namespace).
	a2pid := childOf(t, a2.cmd.Process.Pid)
	if svc, _, ok := a.NamespaceOf(a2pid); !ok || svc != svcA {
		t.Errorf("another process of container a: %v, its store a's: %v", ok, svc == svcA)
	}
	if _, _, ok := a.NamespaceOf(os.Getpid()); ok {
		t.Error("a host process is in a container's key namespace")
	}
	if _, _, ok := a.NamespaceOf(1); ok {
		t.Error("the host's init is in a container's key namespace")
	}
	// Container a's init exits; its other process lives on, but its
	// namespaces may be another container's now.
	pid := a1.cmd.Process.Pid
	a1.exit()
	if _, _, ok := a.NamespaceOf(pid); ok {
		t.Error("the pid of container a's init, exited, still names its namespace")
	}
	if _, _, ok := a.NamespaceOf(a2pid); ok {
		t.Error("a process of a container whose init has exited still finds its namespace")
	}
	a2.exit()
	b1.exit()
	testutil.Eventually(t, "the containers to be reaped", func() bool { return len(a.Containers()) == 0 })
	if _, _, ok := a.NamespaceOf(b1.cmd.Process.Pid); ok {
		t.Error("a reaped container's pid names a namespace")
	}
}

// childOf is the one child of process pid.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	f := strings.Fields(string(b))
	if err != nil || len(f) != 1 {
		t.Fatalf("the child of %d: %q %v", pid, b, err)
	}
	child, _ := strconv.Atoi(f[0])
	return child
}
