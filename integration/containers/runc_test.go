package containers

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ukeys/ukeys/agent"
)

// Containers run by runc, with a seccomp profile that hands their key
// system calls to ukeyd's agent: each adds and finds its own keys, sees
// none of another's, and the kernel's keyrings gain nothing.
func TestRuncContainers(t *testing.T) {
	agent, configure, run, wait := runcAgent(t)

	// Container a adds a key and, three seconds later, finds it still;
	// meanwhile container b looks for it.
	profile := notifyKeyCalls(agent)
	configure(profile, "add", "shared-name", "3")
	var wg sync.WaitGroup
	var a string
	wg.Add(1)
	go func() { defer wg.Done(); a = run(id("a")) }()
	// runc reads the bundle's config when it starts the container: give
	// a's runc its moment before b's config is written.
	wait(id("a"))
	if made := sessionKeyrings(id("a")); len(made) > 0 {
		t.Errorf("runc made a kernel session keyring for container a:\n%s", strings.Join(made, "\n"))
	}
	configure(profile, "search", "shared-name")
	b := run(id("b"))
	wg.Wait()
	if a != "add ok\nsearch ok" {
		t.Errorf("container a: %q", a)
	}
	if b != "search required key not available" {
		t.Errorf("container b found container a's key: %q", b)
	}
	if pk, err := os.ReadFile("/proc/keys"); err == nil && strings.Contains(string(pk), "shared-name") {
		t.Errorf("the kernel holds the containers' key:\n%s", pk)
	}
}

// runcAgent starts a daemon serving as the seccomp agent and a runc
// bundle whose root holds keyprog (runcBundle), or skips the test where
// runc, the go command or root is missing. It returns the agent's
// socket, the bundle's configure and run, and a wait until a container
// runs.
func runcAgent(t *testing.T) (agent string, configure func(seccomp map[string]any, args ...string), run func(id string) string, wait func(id string)) {
	t.Helper()
	runc, gobin := runcAndGo(t)
	dir, agent := agentDaemon(t)
	configure, run = runcBundle(t, runc, gobin, dir)
	wait = func(id string) { waitForContainer(t, runc, filepath.Join(dir, "runc"), id) }
	return agent, configure, run, wait
}

// id is a test's container name, unique to this run.
func id(name string) string { return fmt.Sprintf("ukeys-test-%d-%s", os.Getpid(), name) }

// runcBundle makes a bundle in dir whose root holds keyprog, and
// returns how to configure it (its seccomp profile and keyprog's
// arguments) and to run it as a container, with no kernel session
// keyring of its own (--no-new-keyring): its key calls go to ukeys.
func runcBundle(t *testing.T, runc, gobin, dir string) (configure func(seccomp map[string]any, args ...string), run func(id string) string) {
	t.Helper()
	bundle := filepath.Join(dir, "bundle")
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	goBuild(t, gobin, filepath.Join(rootfs, "keyprog"), "./testdata/keyprog")
	if out, err := exec.Command(runc, "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v\n%s", err, out)
	}
	configure = func(seccomp map[string]any, args ...string) {
		t.Helper()
		editConfig(t, bundle, func(c map[string]any) {
			c["process"].(map[string]any)["args"] = append([]string{"/keyprog"}, args...)
			c["process"].(map[string]any)["terminal"] = false
			c["linux"].(map[string]any)["seccomp"] = seccomp
		})
	}
	run = func(id string) string {
		t.Helper()
		cmd := exec.Command(runc, "--root", filepath.Join(dir, "runc"), "run", "--no-new-keyring", "--bundle", bundle, id)
		out, err := cmd.CombinedOutput()
		if err != nil {
			if strings.Contains(string(out), "seccomp") && strings.Contains(string(out), "not supported") {
				t.Skipf("runc cannot use a seccomp agent here: %s", out)
			}
			t.Fatalf("runc run %s: %v\n%s", id, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	return configure, run
}

// A container whose profile hands the agent the notification pipes'
// calls (as ukeyctl seccomp-profile writes them, listenerMetadata
// included) is told that there are notifications, and gets them: its
// pipe2(O_NOTIFICATION_PIPE) is the daemon's pipe, and a link into a
// watched keyring comes as the kernel's record. One whose profile
// notifies the key calls alone is told there are none.
func TestRuncContainerWatch(t *testing.T) {
	sock, configure, run, _ := runcAgent(t)

	profile := notifyKeyCalls(sock)
	arg := func(op string, value, two uint64) []map[string]any {
		return []map[string]any{{"index": 1, "value": value, "valueTwo": two, "op": op}}
	}
	profile["syscalls"] = append(profile["syscalls"].([]map[string]any),
		map[string]any{"names": []string{"pipe2"}, "action": "SCMP_ACT_NOTIFY", "args": arg("SCMP_CMP_MASKED_EQ", 0x80, 0x80)},
		map[string]any{"names": []string{"ioctl"}, "action": "SCMP_ACT_NOTIFY", "args": arg("SCMP_CMP_EQ", 0x5760, 0)},
		map[string]any{"names": []string{"ioctl"}, "action": "SCMP_ACT_NOTIFY", "args": arg("SCMP_CMP_EQ", 0x5761, 0)})
	profile["listenerMetadata"] = agent.NotifyMetadata
	configure(profile, "watch")
	if got := run(id("watch")); got != "notify true\nwatch link ok" {
		t.Errorf("a container whose profile hands over its notification pipes: %q", got)
	}

	configure(notifyKeyCalls(sock), "watch")
	got := run(id("nowatch"))
	if !strings.HasPrefix(got, "notify false\n") {
		t.Errorf("a container whose profile notifies the key calls alone: %q", got)
	}
}

// waitForContainer waits until runc reports container id as
// running.
func waitForContainer(t *testing.T, runc, root, id string) {
	t.Helper()
	for range 200 {
		out, err := exec.Command(runc, "--root", root, "state", id).Output()
		if err == nil && strings.Contains(string(out), `"running"`) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("container %s did not start", id)
}
