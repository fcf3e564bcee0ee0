package containers

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
)

// The container tests (runc, crun, podman, Docker) share their set-up and
// their check: a ukeyd with its seccomp agent, static programs built for
// the container, and two containers that must not see each other's keys.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if bin.dir != "" {
			os.RemoveAll(bin.dir)
		}
		os.Exit(code)
	}))
}

// bin is the ukeyd the tests run, built once, by the first test that
// needs it, from ../../cmd/ukeyd: a test of this package is a user of the
// daemon, as a container host is, and knows it only by its flags.
var bin struct {
	once sync.Once
	dir  string
	path string
	err  error
	out  []byte
}

// ukeyd returns the path of the daemon built for the tests, with the race
// detector when the tests have it: the daemon is the code under test,
// not the test binary.
func ukeyd(t *testing.T) string {
	t.Helper()
	bin.once.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			bin.err = err
			return
		}
		if bin.dir, bin.err = os.MkdirTemp("", "ukeys-integration-"); bin.err != nil {
			return
		}
		bin.path = filepath.Join(bin.dir, "ukeyd")
		args := []string{"build", "-o", bin.path}
		if info, ok := debug.ReadBuildInfo(); ok {
			for _, s := range info.Settings {
				if s.Key == "-race" && s.Value == "true" {
					args = append(args, "-race")
				}
			}
		}
		bin.out, bin.err = exec.Command(gobin, append(args, "../../cmd/ukeyd")...).CombinedOutput()
	})
	if bin.err != nil {
		t.Fatalf("go build ukeyd: %v\n%s", bin.err, bin.out)
	}
	return bin.path
}

// agentDaemon starts ukeyd with its seccomp agent (and flags extra) in a
// directory of the test's own, waits until it serves, and returns the
// directory and the agent's socket. The daemon is killed when the test
// ends.
func agentDaemon(t *testing.T, extra ...string) (dir, agent string) {
	t.Helper()
	dir, agent, _ = agentDaemonLog(t, extra...)
	return dir, agent
}

// agentDaemonLog is agentDaemon, and returns the daemon's log too.
func agentDaemonLog(t *testing.T, extra ...string) (dir, agent string, log *testutil.Buffer) {
	t.Helper()
	dir = t.TempDir()
	agent = filepath.Join(dir, "agent.sock")
	socket := filepath.Join(dir, "run", "ukeyd.sock")
	cmd := exec.Command(ukeyd(t), append([]string{"-socket", socket, "-request-key", "", "-metrics", "127.0.0.1:0",
		"-log-level", "debug", "-seccomp-agent", agent}, extra...)...)
	stderr := &testutil.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	testutil.Eventually(t, "the daemon to serve", func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the daemon exited: %v\n%s", err, stderr)
		default:
		}
		cl, err := client.Dial(socket)
		if err != nil {
			return false
		}
		defer cl.Close()
		_, err = cl.Status()
		return err == nil
	})
	return dir, agent, stderr
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
// not hold it, nor a session keyring for a while it runs. run makes the
// engine's command for one container running keyprog with args;
// runtimeID says the id the engine gave the container to its OCI
// runtime, which names the runtime's session keyring.
func twoContainers(t *testing.T, engine, desc string, run func(name string, args ...string) *exec.Cmd, runtimeID func(name string) string) {
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
	if ida := runtimeID("a"); ida == "" {
		t.Errorf("%s: container a's id is not known", engine)
	} else if made := sessionKeyrings(ida); len(made) > 0 {
		t.Errorf("%s made a kernel session keyring for container a:\n%s", engine, strings.Join(made, "\n"))
	}
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
