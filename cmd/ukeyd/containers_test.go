package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The container tests (runc, podman, Docker) share their set-up and their
// check: a ukeyd with its seccomp agent, static programs built for the
// container, and two containers that must not see each other's keys.

// agentDaemon starts ukeyd with its seccomp agent in a directory of the
// test's own, and returns the directory and the agent's socket.
func agentDaemon(t *testing.T) (dir, agent string) {
	t.Helper()
	dir = t.TempDir()
	agent = filepath.Join(dir, "agent.sock")
	startChild(t, filepath.Join(dir, "run", "ukeyd.sock"), childOpts{args: []string{"-seccomp-agent", agent}})
	return dir, agent
}

// notifyKeyCalls is a config.json seccomp section that hands the key
// system calls to the agent at listener and lets everything else through.
func notifyKeyCalls(listener string) map[string]any {
	return map[string]any{
		"defaultAction": "SCMP_ACT_ALLOW",
		"listenerPath":  listener,
		"syscalls": []map[string]any{{
			"names":  []string{"add_key", "keyctl", "request_key"},
			"action": "SCMP_ACT_NOTIFY",
		}},
	}
}

// goBuild builds package pkg (relative to this one) as a static program
// at out, for a container with nothing else in it.
func goBuild(t *testing.T, gobin, out, pkg string) {
	t.Helper()
	build := exec.Command(gobin, "build", "-o", out, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// twoContainers runs container a, which adds a user key desc and three
// seconds later finds it still, and, once a has added it, container b,
// which looks for it: b must not find it, and the kernel's keyrings must
// not hold it. run makes the engine's command for one container running
// keyprog with args.
func twoContainers(t *testing.T, engine, desc string, run func(name string, args ...string) *exec.Cmd) {
	t.Helper()
	ca := run("a", "add", desc, "3")
	var aerr strings.Builder
	ca.Stderr = &aerr
	aout, err := ca.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Start(); err != nil {
		t.Fatal(err)
	}
	said := bufio.NewReader(aout)
	first, _ := said.ReadString('\n')
	b, err := run("b", "search", desc).CombinedOutput()
	if err != nil {
		t.Errorf("%s run b: %v\n%s", engine, err, b)
	}
	rest, _ := io.ReadAll(said)
	if err := ca.Wait(); err != nil {
		t.Errorf("%s run a: %v\n%s", engine, err, aerr.String())
	}
	if a := first + string(rest); a != "add ok\nsearch ok\n" {
		t.Errorf("container a: %q", a)
	}
	if strings.TrimSpace(string(b)) != "search required key not available" {
		t.Errorf("container b found container a's key: %q", b)
	}
	if pk, err := os.ReadFile("/proc/keys"); err == nil && strings.Contains(string(pk), desc) {
		t.Errorf("the kernel holds the containers' key:\n%s", pk)
	}
}
