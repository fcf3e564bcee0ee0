package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/internal/ukeystest"
)

// Containers run by podman (with runc), with the profile ukeyctl
// seccomp-profile makes from podman's own default: the README's recipe
// as a user follows it. Each container adds and finds its own keys and
// sees none of another's; the kernel's keyrings gain nothing.
func TestPodmanContainers(t *testing.T) {
	ukeystest.NeedRoot(t, "podman runs containers as root here")
	podman, err := exec.LookPath("podman")
	if err != nil {
		t.Skip("needs podman (Debian package podman)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("needs runc (Debian package runc)")
	}
	const defaultProfile = "/usr/share/containers/seccomp.json"
	if _, err := os.Stat(defaultProfile); err != nil {
		t.Skip("needs podman's default seccomp profile, " + defaultProfile)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command to build the container's program")
	}
	dir := t.TempDir()
	agent := filepath.Join(dir, "agent.sock")
	startChild(t, filepath.Join(dir, "run", "ukeyd.sock"), childOpts{args: []string{"-seccomp-agent", agent}})

	rootfs := filepath.Join(dir, "rootfs")
	for _, b := range [][]string{
		{"build", "-o", filepath.Join(rootfs, "keyprog"), "./testdata/keyprog"},
		{"build", "-o", filepath.Join(dir, "ukeyctl"), "../ukeyctl"},
	} {
		build := exec.Command(gobin, b...)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", b, err, out)
		}
	}
	profile := filepath.Join(dir, "profile.json")
	out, err := exec.Command(filepath.Join(dir, "ukeyctl"), "seccomp-profile", "--listener", agent, defaultProfile).Output()
	if err != nil {
		t.Fatalf("ukeyctl seccomp-profile: %v", err)
	}
	if err := os.WriteFile(profile, out, 0o644); err != nil {
		t.Fatal(err)
	}
	podmanWith := func(seccomp, name string, args ...string) *exec.Cmd {
		return exec.Command(podman, append([]string{
			"--root", filepath.Join(dir, "storage"), "--runroot", filepath.Join(dir, "runroot"),
			"--storage-driver", "vfs", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "file",
			"run", "--rm", "--name", fmt.Sprintf("ukeys-test-%d-%s", os.Getpid(), name), "--net", "none",
			// Within this host's limits (podman asks for more than
			// a host may allow).
			"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
			"--security-opt", "seccomp=" + seccomp, "--rootfs", rootfs, "/keyprog"}, args...)...)
	}
	podmanRun := func(name string, args ...string) *exec.Cmd { return podmanWith(profile, name, args...) }
	// A host where podman cannot run a container at all (its cgroups,
	// its limits) is not one to test the agent on.
	if out, err := podmanWith("unconfined", "plain", "search", "none").CombinedOutput(); err != nil {
		t.Skipf("podman cannot run a container here, even without the profile: %v\n%s", err, out)
	}
	// Container a adds a key and, three seconds later, finds it still;
	// once it has added it, container b looks for it.
	ca := podmanRun("a", "add", "podman-shared", "3")
	ca.Stderr = os.Stderr
	aout, err := ca.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Start(); err != nil {
		t.Fatal(err)
	}
	said := bufio.NewReader(aout)
	first, _ := said.ReadString('\n')
	b, err := podmanRun("b", "search", "podman-shared").CombinedOutput()
	if err != nil {
		t.Errorf("podman run b: %v\n%s", err, b)
	}
	rest, _ := io.ReadAll(said)
	if err := ca.Wait(); err != nil {
		t.Errorf("podman run a: %v", err)
	}
	if a := first + string(rest); a != "add ok\nsearch ok\n" {
		t.Errorf("container a: %q", a)
	}
	if strings.TrimSpace(string(b)) != "search required key not available" {
		t.Errorf("container b found container a's key: %q", b)
	}
	if pk, err := os.ReadFile("/proc/keys"); err == nil && strings.Contains(string(pk), "podman-shared") {
		t.Errorf("the kernel holds the containers' key:\n%s", pk)
	}
}
