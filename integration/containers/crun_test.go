package containers

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/ukeystest"
)

// Containers run by crun, with the profile's seccomp section handing
// their key system calls to ukeyd's agent: as with runc, each adds and
// finds its own keys, sees none of another's, and the kernel's keyrings
// gain nothing, not even a session keyring.
func TestCrunContainers(t *testing.T) {
	ukeystest.NeedRoot(t, "crun runs containers as root here")
	crun, err := exec.LookPath("crun")
	if err != nil {
		t.Skip("needs crun (Debian package crun)")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command to build the container's program")
	}
	dir, agent := agentDaemon(t)
	rootfs := filepath.Join(dir, "rootfs")
	goBuild(t, gobin, filepath.Join(rootfs, "keyprog"), "./testdata/keyprog")
	state := filepath.Join(dir, "crun")

	// crun refuses a host whose cgroups mix v1 hierarchies with a v2
	// mount ("hybrid mode"). There, each container runs in a mount
	// namespace of its own with a bare cgroup2 at /sys/fs/cgroup and no
	// cgroup manager: the agent is what is tested, not crun's cgroups.
	direct := func(args ...string) *exec.Cmd {
		return exec.Command(crun, append([]string{"--root", state}, args...)...)
	}
	isolated := func(args ...string) *exec.Cmd {
		return exec.Command("unshare", append([]string{"--mount", "sh", "-c",
			`mount -t cgroup2 none /sys/fs/cgroup && exec "$0" --cgroup-manager=disabled "$@"`, crun, "--root", state}, args...)...)
	}
	command := direct

	// One bundle per container, sharing the root: crun reads the
	// program's arguments from the bundle's config.
	bundle := func(name string, seccomp bool, args ...string) string {
		t.Helper()
		b := filepath.Join(dir, "bundle-"+name)
		if err := os.MkdirAll(b, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(crun, "spec", "--bundle", b).CombinedOutput(); err != nil {
			t.Fatalf("crun spec: %v\n%s", err, out)
		}
		p := filepath.Join(b, "config.json")
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var c map[string]any
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		c["root"] = map[string]any{"path": rootfs, "readonly": true}
		proc := c["process"].(map[string]any)
		proc["args"] = append([]string{"/keyprog"}, args...)
		proc["terminal"] = false
		if seccomp {
			c["linux"].(map[string]any)["seccomp"] = notifyKeyCalls(agent)
		}
		if raw, err = json.Marshal(c); err == nil {
			err = os.WriteFile(p, raw, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// A container without the profile first: can crun run one here at all?
	plain := bundle("plain", false, "search", "none")
	out, err := direct("run", "--bundle", plain, id("plain")).CombinedOutput()
	if strings.Contains(string(out), "hybrid mode") {
		command = isolated
		out, err = isolated("run", "--bundle", plain, id("plain")).CombinedOutput()
	}
	if !strings.HasPrefix(string(out), "search ") {
		t.Skipf("crun cannot run a container here, even without the profile: %v\n%s", err, out)
	}
	// --no-new-keyring: no kernel session keyring per container, as
	// with runc.
	twoContainers(t, "crun", "crun-shared", func(name string, args ...string) *exec.Cmd {
		return command("run", "--no-new-keyring", "--bundle", bundle(name, true, args...), id(name))
	}, id)
}
