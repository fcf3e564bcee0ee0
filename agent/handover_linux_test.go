package agent_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/internal/testutil"
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
// the agent serving as before: its containers' keys, made again from
// what it froze, and its socket.
func TestAgentHandOverFails(t *testing.T) {
	dir := t.TempDir()
	a, sock := agentTest(t, dir, agent.Config{})
	a1 := runInContainer(t, sock, "ctr-a", "add", "a-key")
	if got := a1.result(t); got != "ok" {
		t.Fatalf("adding in container a: %s", got)
	}
	var buf bytes.Buffer
	_, done, err := a.HandOver(&buf)
	if err != nil {
		t.Fatal(err)
	}
	done(false)
	if got := a.Containers(); !slices.Equal(got, []string{"ctr-a"}) {
		t.Fatalf("the agent holds %v after a failed hand-over", got)
	}
	a2 := a1.runAnother(t, sock, "ctr-a", "search", "a-key")
	if got := a2.result(t); got != "ok" {
		t.Fatalf("container a's key after a failed hand-over: %s", got)
	}
	a1.exit()
	a2.exit()
	testutil.Eventually(t, "the container to be reaped", func() bool { return len(a.Containers()) == 0 })
}
