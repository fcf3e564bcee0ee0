package agent_test

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/ukeystest"
)

// handOver hands a's containers to a new agent as a daemon's hand-over
// does (the descriptors crossing as copies), and returns it, serving the
// socket handed over.
func handOver(t *testing.T, a *agent.Agent) *agent.Agent {
	t.Helper()
	var buf bytes.Buffer
	fds, done, err := a.HandOver(&buf)
	if err != nil {
		t.Fatal(err)
	}
	copies := make([]int, len(fds))
	for i, fd := range fds {
		if copies[i], err = unix.Dup(fd); err != nil {
			t.Fatal(err)
		}
	}
	b := agent.New(agent.Config{})
	start, err := b.TakeOver(&buf, copies)
	if err != nil {
		done(false)
		t.Fatal(err)
	}
	done(true)
	start(true)
	lns := b.Listeners()
	if len(lns) != 1 {
		t.Fatalf("%d listening sockets handed over, want 1", len(lns))
	}
	served := make(chan error, 1)
	go func() { served <- b.Serve(lns[0]) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		<-served
	})
	return b
}

// A hand-over moves every container's namespace, with its keys, and
// the agent's socket: a process of container a (started after it, as
// runc exec does) finds a's key through the socket handed over, b's
// namespace is still apart, the old agent holds nothing more, and a
// container's namespace still ends with its last process.
func TestAgentHandOver(t *testing.T) {
	dir := t.TempDir()
	a, sock := agentTest(t, dir, agent.Config{})
	a1 := runInContainer(t, sock, "ctr-a", "add", "a-key")
	if got := a1.result(t); got != "ok" {
		t.Fatalf("adding in container a: %s", got)
	}
	b1 := runInContainer(t, sock, "ctr-b", "add", "b-key")
	if got := b1.result(t); got != "ok" {
		t.Fatalf("adding in container b: %s", got)
	}

	b := handOver(t, a)
	if got := a.Containers(); len(got) != 0 {
		t.Errorf("the old agent still holds %v", got)
	}
	if got := b.Containers(); !slices.Equal(got, []string{"ctr-a", "ctr-b"}) {
		t.Fatalf("the new agent holds %v", got)
	}
	a2 := a1.runAnother(t, sock, "ctr-a", "search", "a-key")
	if got := a2.result(t); got != "ok" {
		t.Fatalf("container a's key after the hand-over: %s", got)
	}
	b2 := b1.runAnother(t, sock, "ctr-b", "search", "a-key")
	if got := b2.result(t); got != "required key not available" {
		t.Fatalf("container b found container a's key after the hand-over: %s", got)
	}
	for _, c := range []*container{a1, a2, b1, b2} {
		c.exit()
	}
	testutil.Eventually(t, "the containers to be reaped", func() bool { return len(b.Containers()) == 0 })
}

// A hand-over that fails (the new daemon never says it serves) leaves
// the agent serving as before: its containers' and pods' keys, made
// again from what it froze, and its socket; a pod's container still
// leaves with its own last process, and the pod with its last container.
func TestAgentHandOverFails(t *testing.T) {
	dir := t.TempDir()
	a, sock := agentTest(t, dir, agent.Config{})
	a1 := runInContainer(t, sock, "ctr-a", "add", "a-key")
	if got := a1.result(t); got != "ok" {
		t.Fatalf("adding in container a: %s", got)
	}
	_, nsenter := exec.LookPath("nsenter")
	var pod []*container
	if nsenter == nil {
		sa := startInContainer(t, sock, "pod-a", "add", "ticket", inContainer{podNS: true, annotations: criPod("pod-a", true)})
		if got := sa.result(t); got != "ok" {
			t.Fatalf("pod a's sandbox: %s", got)
		}
		side := startInContainer(t, sock, "a-side", "search", "ticket", inContainer{pod: sa, annotations: criPod("pod-a", false)})
		if got := side.result(t); got != "ok" {
			t.Fatalf("pod a's sidecar: %s", got)
		}
		pod = []*container{sa, side}
	}
	var buf bytes.Buffer
	_, done, err := a.HandOver(&buf)
	if err != nil {
		t.Fatal(err)
	}
	done(false)
	want := []string{"ctr-a"}
	if pod != nil {
		want = []string{"a-side", "ctr-a", "pod-a"}
	}
	if got := a.Containers(); !slices.Equal(got, want) {
		t.Fatalf("the agent holds %v after a failed hand-over, want %v", got, want)
	}
	a2 := a1.runAnother(t, sock, "ctr-a", "search", "a-key")
	if got := a2.result(t); got != "ok" {
		t.Fatalf("container a's key after a failed hand-over: %s", got)
	}
	if pod != nil {
		pod[0].exit()
		testutil.Eventually(t, "pod a's sandbox to leave", func() bool {
			return slices.Equal(a.Containers(), []string{"a-side", "ctr-a"})
		})
		side2 := pod[1].runAnother(t, sock, "a-side", "search", "ticket")
		if got := side2.result(t); got != "ok" {
			t.Fatalf("pod a's sidecar after a failed hand-over and its sandbox's exit: %s", got)
		}
		x := startInContainer(t, sock, "x-pod-a", "search", "ticket", inContainer{podNS: true, annotations: criPod("pod-a", false)})
		if got := x.result(t); got != "function not implemented" {
			t.Fatalf("a container naming pod a's sandbox from its own namespaces after a failed hand-over: %s", got)
		}
		x.exit()
		pod[1].exit()
		side2.exit()
		testutil.Eventually(t, "pod a's keys to go", func() bool { return len(a.Pods()) == 0 })
	} else {
		t.Log("no nsenter (util-linux): no pod")
	}
	a1.exit()
	a2.exit()
	testutil.Eventually(t, "the container to be reaped", func() bool { return len(a.Containers()) == 0 })
}

// A pod goes with a hand-over as one key namespace: its sidecar's key is
// its main container's still (a process of it started after, as runc
// exec does, finds it), a container that joins the pod afterwards finds
// it too (the pod's binding, checked again by the new agent), one that
// names the pod's sandbox from namespaces of its own is still refused,
// and the pod's keys stay while any of its containers runs and go with
// the last.
func TestAgentPodHandOver(t *testing.T) {
	ukeystest.NeedRoot(t, "to give pods IPC and network namespaces of their own")
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter (util-linux)")
	}
	a, sock := agentTest(t, t.TempDir(), agent.Config{})
	sa, side := startPodA(t, sock)
	main := startInContainer(t, sock, "a-main", "search", "ticket", inContainer{pod: sa, annotations: criPod("pod-a", false)})
	if got := main.result(t); got != "ok" {
		t.Fatalf("pod a's main container: %s", got)
	}
	solo := runInContainer(t, sock, "solo", "add", "solo-key")
	if got := solo.result(t); got != "ok" {
		t.Fatalf("a container of its own: %s", got)
	}

	b := handOver(t, a)
	if got := a.Pods(); len(got) != 0 {
		t.Errorf("the old agent still holds pods %v", got)
	}
	if got := b.Pods(); !slices.Equal(got, []string{"pod-a"}) {
		t.Fatalf("the new agent holds pods %v", got)
	}
	if got := b.Containers(); !slices.Equal(got, []string{"a-main", "a-side", "pod-a", "solo"}) {
		t.Fatalf("the new agent holds %v", got)
	}
	main2 := main.runAnother(t, sock, "a-main", "search", "ticket")
	if got := main2.result(t); got != "ok" {
		t.Fatalf("pod a's main container after the hand-over: %s", got)
	}
	solo2 := solo.runAnother(t, sock, "solo", "search", "ticket")
	if got := solo2.result(t); got != "required key not available" {
		t.Fatalf("a container of its own found pod a's ticket after the hand-over: %s", got)
	}
	late := startInContainer(t, sock, "a-late", "search", "ticket", inContainer{pod: sa, annotations: criPod("pod-a", false)})
	if got := late.result(t); got != "ok" {
		t.Fatalf("a container joining pod a after the hand-over: %s", got)
	}
	x := startInContainer(t, sock, "x-pod-a", "search", "ticket", inContainer{podNS: true, annotations: criPod("pod-a", false)})
	if got := x.result(t); got != "function not implemented" {
		t.Fatalf("a container naming pod a's sandbox from its own namespaces after the hand-over: %s", got)
	}

	// The sandbox and the sidecar exit: the pod's keys stay for its
	// main container, and go with its last.
	sa.exit()
	side.exit()
	testutil.Eventually(t, "the sandbox and sidecar to leave", func() bool {
		return slices.Equal(b.Containers(), []string{"a-late", "a-main", "solo"})
	})
	main3 := main.runAnother(t, sock, "a-main", "search", "ticket")
	if got := main3.result(t); got != "ok" {
		t.Fatalf("pod a's main container once its sandbox and sidecar have exited: %s", got)
	}
	for _, c := range []*container{main, main2, main3, late, x} {
		c.exit()
	}
	testutil.Eventually(t, "pod a's keys to go", func() bool { return len(b.Pods()) == 0 })
	solo.exit()
	solo2.exit()
	testutil.Eventually(t, "every container to leave", func() bool { return len(b.Containers()) == 0 })
}
