package containers

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/ukeystest"
)

// Containers run by podman (with runc), with the profile ukeyctl
// seccomp-profile makes from podman's own default and keyring = false in
// containers.conf: docs/containers.md's recipe as a user follows it. Each
// container adds and finds its own keys and sees none of another's; the
// kernel's keyrings gain nothing, not even a session keyring.
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
	dir, agent := agentDaemon(t)
	// podman run --rm leaves the container's removal to a "podman
	// container cleanup" that conmon starts as the container exits, and
	// that may still write in the storage once run has returned: under
	// load the test directory's removal then failed ("directory not
	// empty"). Wait for those (their command lines name the storage).
	t.Cleanup(func() { awaitProcessesNaming(filepath.Join(dir, "storage")) })
	rootfs := filepath.Join(dir, "rootfs")
	goBuild(t, gobin, filepath.Join(rootfs, "keyprog"), "./testdata/keyprog")
	goBuild(t, gobin, filepath.Join(dir, "ukeyctl"), "../../cmd/ukeyctl")
	profile := filepath.Join(dir, "profile.json")
	out, err := exec.Command(filepath.Join(dir, "ukeyctl"), "seccomp-profile", "--listener", agent, defaultProfile).Output()
	if err != nil {
		t.Fatalf("ukeyctl seccomp-profile: %v", err)
	}
	if err := os.WriteFile(profile, out, 0o644); err != nil {
		t.Fatal(err)
	}
	// The recipe's containers.conf, the test's own: podman reads
	// CONTAINERS_CONF in place of the host's.
	conf := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(conf, []byte("[containers]\nkeyring = false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cid := func(name string) string { return filepath.Join(dir, name+".cid") }
	podmanWith := func(seccomp, name string, args ...string) *exec.Cmd {
		cmd := exec.Command(podman, append([]string{
			"--root", filepath.Join(dir, "storage"), "--runroot", filepath.Join(dir, "runroot"),
			"--storage-driver", "vfs", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "file",
			"run", "--rm", "--name", fmt.Sprintf("ukeys-test-%d-%s", os.Getpid(), name), "--cidfile", cid(name), "--net", "none",
			// Within this host's limits (podman asks for more than
			// a host may allow).
			"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
			"--security-opt", "seccomp=" + seccomp, "--rootfs", rootfs, "/keyprog"}, args...)...)
		cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
		return cmd
	}
	podmanRun := func(name string, args ...string) *exec.Cmd { return podmanWith(profile, name, args...) }
	// A host where podman cannot run a container at all (its cgroups,
	// its limits) is not one to test the agent on.
	if out, err := podmanWith("unconfined", "plain", "search", "none").CombinedOutput(); err != nil {
		t.Skipf("podman cannot run a container here, even without the profile: %v\n%s", err, out)
	}
	twoContainers(t, "podman", "podman-shared", podmanRun, func(name string) string {
		b, _ := os.ReadFile(cid(name))
		return strings.TrimSpace(string(b))
	})
}

// awaitProcessesNaming waits, 30 s at most, until no process's command
// line holds s.
func awaitProcessesNaming(s string) {
	for range 600 {
		found := false
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(b), s) {
				found = true
				break
			}
		}
		if !found {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
