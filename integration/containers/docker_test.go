package containers

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ukeys/ukeys/ukeystest"
)

// Containers run by Docker, with the profile ukeyctl seccomp-profile
// makes and ukeyctl oci-runtime registered as the runtime (a Docker that
// drops a profile's listenerPath, as Debian 12's 20.10 does, needs it):
// docs/containers.md's recipe, on a dockerd of the test's own. Each container
// adds and finds its own keys and sees none of another's; the kernel's
// keyrings gain nothing, not even a session keyring (ukeyctl oci-runtime
// gives runc --no-new-keyring).
func TestDockerContainers(t *testing.T) {
	ukeystest.NeedRoot(t, "dockerd runs as root")
	var tools [4]string
	for i, name := range []string{"dockerd", "docker", "runc", "go"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("needs %s (Debian packages docker.io and runc; the go command)", name)
		}
		tools[i] = p
	}
	dockerd, docker, gobin := tools[0], tools[1], tools[3]
	dir, agent := agentDaemon(t)
	rootfs := filepath.Join(dir, "rootfs")
	ukeyctl := filepath.Join(dir, "ukeyctl")
	goBuild(t, gobin, filepath.Join(rootfs, "keyprog"), "./testdata/keyprog")
	goBuild(t, gobin, ukeyctl, "../../cmd/ukeyctl")
	// Docker's profile: podman's default stands in for it where it is
	// installed (the same rules in the same JSON form); else the
	// smallest one that allows the rest.
	base := `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[]}`
	if b, err := os.ReadFile("/usr/share/containers/seccomp.json"); err == nil {
		base = string(b)
	}
	profileCmd := exec.Command(ukeyctl, "seccomp-profile", "--listener", agent)
	profileCmd.Stdin = strings.NewReader(base)
	profile, err := profileCmd.Output()
	if err != nil {
		t.Fatalf("ukeyctl seccomp-profile: %v", err)
	}
	profilePath := filepath.Join(dir, "profile.json")
	os.WriteFile(profilePath, profile, 0o644)
	daemonJSON, _ := json.Marshal(map[string]any{"runtimes": map[string]any{"ukeys": map[string]any{
		"path": ukeyctl, "runtimeArgs": []string{"oci-runtime", "--listener", agent, "--"}}}})
	config := filepath.Join(dir, "daemon.json")
	os.WriteFile(config, daemonJSON, 0o644)

	// A dockerd of the test's own, with no network and plain directories
	// for storage.
	host := "unix://" + filepath.Join(dir, "docker.sock")
	d := exec.Command(dockerd, "--config-file", config, "-H", host,
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "docker.pid"), "--iptables=false", "--ip6tables=false",
		"--bridge=none", "--storage-driver=vfs")
	var dlog strings.Builder
	d.Stdout, d.Stderr = &dlog, &dlog
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { d.Wait(); close(stopped) }()
	t.Cleanup(func() {
		d.Process.Signal(syscall.SIGTERM)
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			d.Process.Kill()
			<-stopped
		}
	})
	dockerCmd := func(args ...string) *exec.Cmd {
		c := exec.Command(docker, args...)
		c.Env = append(os.Environ(), "DOCKER_HOST="+host)
		return c
	}
	for i := 0; ; i++ {
		if dockerCmd("info").Run() == nil {
			break
		}
		select {
		case <-stopped:
			t.Skipf("dockerd does not run here:\n%s", dlog.String())
		case <-time.After(100 * time.Millisecond):
		}
		if i == 300 {
			t.Fatalf("dockerd did not answer:\n%s", dlog.String())
		}
	}
	imp := dockerCmd("import", "-", "ukeys-keyprog:test")
	tarball := exec.Command("tar", "-C", rootfs, "-c", ".")
	tarball.Stdout, _ = imp.StdinPipe()
	if err := imp.Start(); err != nil {
		t.Fatal(err)
	}
	if err := tarball.Run(); err != nil {
		t.Fatalf("tar: %v", err)
	}
	tarball.Stdout.(io.Closer).Close()
	if err := imp.Wait(); err != nil {
		t.Fatalf("docker import: %v", err)
	}
	cid := func(name string) string { return filepath.Join(dir, name+".cid") }
	run := func(name string, args ...string) *exec.Cmd {
		return dockerCmd(append([]string{"run", "--rm", "--name", fmt.Sprintf("ukeys-test-%s", name), "--cidfile", cid(name),
			"--net", "none", "--runtime", "ukeys", "--security-opt", "seccomp=" + profilePath,
			"ukeys-keyprog:test", "/keyprog"}, args...)...)
	}
	// A host where Docker cannot run a container at all is not one to
	// test the agent on.
	if out, err := dockerCmd("run", "--rm", "--net", "none", "--security-opt", "seccomp=unconfined",
		"ukeys-keyprog:test", "/keyprog", "search", "none").CombinedOutput(); err != nil {
		t.Skipf("Docker cannot run a container here, even without the profile: %v\n%s", err, out)
	}
	twoContainers(t, "docker", "docker-shared", run, func(name string) string {
		b, _ := os.ReadFile(cid(name))
		return strings.TrimSpace(string(b))
	})
}
