package containers

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/ukeystest"
)

// Pods run by containerd's CRI plugin, the way a kubelet runs them
// (crictl speaks the CRI as the kubelet does): a pod sandbox from a
// locally made pause image, containers with a localhost seccomp profile
// that names ukeyd's agent (made by ukeyctl seccomp-profile from
// podman's default where it is installed). A pod is a key namespace: a
// key its sidecar adds its main container finds, and so does a
// container started once the sidecar has exited while the main one
// runs; a container of another pod does not, nor one of the same pod
// whose profile asks for a namespace of its own (ukeys:per-container);
// once the pod's last container has exited its keys are gone, unless
// the pod's pause is under the profile too. The kernel's keyrings gain
// nothing.
func TestCRIPods(t *testing.T) {
	cri := startCRI(t)
	a := cri.runPod("a")
	b := cri.runPod("b")

	// The sidecar and the main container run until stopped.
	ca := cri.start(a, "sidecar", "add", "cri-shared", "600")
	cri.waitFor(ca, "add ok\n")
	main := cri.start(a, "main", "search", "cri-shared", "600")
	cri.waitFor(main, "search ok\n")
	own := cri.startWith(a, cri.perContainer, "own", "search", "cri-shared")
	if got := cri.wait(own); got != "search required key not available\n" {
		t.Errorf("a container of pod a with a key namespace of its own found the pod's key: %q", got)
	}
	// runc joins a new kernel session keyring, _ses.<id>, for every
	// container it starts (the sandboxes' pause too), unless told not to:
	// that is the quota a node runs out of. Containers whose key calls
	// go to ukeys need none.
	if made := sessionKeyrings(a.id, b.id, ca); len(made) > 0 {
		t.Errorf("runc made kernel session keyrings for the pods:\n%s", strings.Join(made, "\n"))
	}
	cb := cri.start(b, "searcher", "search", "cri-shared")
	if got := cri.wait(cb); got != "search required key not available\n" {
		t.Errorf("a container of pod b found pod a's key: %q", got)
	}
	cri.must("stop", "--timeout", "1", ca)
	if got := cri.wait(ca); got != "add ok\n" {
		t.Errorf("pod a's sidecar: %q", got)
	}
	// The sidecar has exited, the main container runs: the pod's keys
	// stay.
	late := cri.start(a, "late", "search", "cri-shared")
	if got := cri.wait(late); got != "search ok\n" {
		t.Errorf("a container of pod a started once its sidecar had exited: %q", got)
	}
	cri.must("stop", "--timeout", "1", main)
	if got := cri.wait(main); got != "search ok\n" {
		t.Errorf("pod a's main container: %q", got)
	}
	// The pod's last container has exited (its sandbox's pause is not
	// served): its keys go, and a container started then has none.
	testutil.Eventually(t, "pod a's keys to go", func() bool {
		return cri.logged("pod's last process has exited; its keys are gone", "pod="+a.id)
	})
	again := cri.start(a, "again", "search", "cri-shared")
	if got := cri.wait(again); got != "search required key not available\n" {
		t.Errorf("a container of pod a once its keys had gone: %q", got)
	}
	// A pod whose sandbox's pause is under the profile too: its keys
	// live as long as the pod, past every container's exit.
	c := cri.runPodWith("c", cri.profile)
	testutil.Eventually(t, "pod c's pause to be served", func() bool {
		return cri.logged("serving a container's key calls", "container="+c.id, "pod="+c.id)
	})
	if got := cri.wait(cri.start(c, "first", "add", "cri-pod")); got != "add ok\n" {
		t.Errorf("pod c's first container: %q", got)
	}
	if got := cri.wait(cri.start(c, "second", "search", "cri-pod")); got != "search ok\n" {
		t.Errorf("pod c's second container, once the first had exited: %q", got)
	}
	if pk, err := os.ReadFile("/proc/keys"); err == nil && strings.Contains(string(pk), "cri-shared") {
		t.Errorf("the kernel holds the pods' key:\n%s", pk)
	}
}

// criRig is a containerd of the test's own (its root, state, socket and
// runc root in the test's directory, so that nothing of the host's
// containerd is touched), with the pause and keyprog images imported,
// a ukeyd serving as its containers' seccomp agent, and the profile
// that hands their key calls to it.
type criRig struct {
	t       *testing.T
	dir     string
	crictl  string
	sock    string
	profile string
	// perContainer is the profile with ukeys:per-container in its
	// listenerMetadata; log the daemon's log.
	perContainer string
	log          *testutil.Buffer
}

// startCRI starts the rig, or skips the test where root, containerd,
// ctr, crictl, runc or the go command is missing.
func startCRI(t *testing.T) *criRig {
	t.Helper()
	return startCRIWith(t, func() (string, string, *testutil.Buffer) { return agentDaemonLog(t) })
}

// startCRIWith is startCRI with the ukeyd that daemon starts: it returns
// the test's directory, the agent's socket and the daemon's log.
func startCRIWith(t *testing.T, daemon func() (dir, agent string, log *testutil.Buffer)) *criRig {
	t.Helper()
	ukeystest.NeedRoot(t, "containerd runs pods as root")
	need := map[string]string{
		"containerd": "Debian package containerd",
		"ctr":        "Debian package containerd",
		"runc":       "Debian package runc",
		"crictl":     "go install sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0",
		"go":         "the go command builds the pods' programs",
	}
	paths := map[string]string{}
	for cmd, how := range need {
		p, err := exec.LookPath(cmd)
		if err != nil {
			t.Skipf("needs %s (%s)", cmd, how)
		}
		paths[cmd] = p
	}
	dir, agent, ukeydLog := daemon()
	r := &criRig{t: t, dir: dir, crictl: paths["crictl"], sock: filepath.Join(dir, "containerd.sock"), log: ukeydLog}

	// The images: a pause program for the sandboxes and keyprog for the
	// containers, each one static binary in a docker-archive that ctr
	// imports, so that no registry is needed.
	images := filepath.Join(dir, "images")
	goBuild(t, paths["go"], filepath.Join(images, "pause"), "./testdata/pause")
	goBuild(t, paths["go"], filepath.Join(images, "keyprog"), "./testdata/keyprog")
	goBuild(t, paths["go"], filepath.Join(dir, "ukeyctl"), "../../cmd/ukeyctl")
	pauseTar := imageArchive(t, filepath.Join(images, "pause"), criPause)
	keyprogTar := imageArchive(t, filepath.Join(images, "keyprog"), criKeyprog)

	// The profile: podman's default with the key calls notified, as
	// docs/containers.md makes it for Kubernetes; without podman's
	// default, everything allowed but the key calls.
	r.profile = filepath.Join(dir, "profile.json")
	var profile []byte
	if _, err := os.Stat(podmanProfile); err == nil {
		out, err := exec.Command(filepath.Join(dir, "ukeyctl"), "seccomp-profile", "--listener", agent, podmanProfile).Output()
		if err != nil {
			t.Fatalf("ukeyctl seccomp-profile: %v", err)
		}
		profile = out
	} else if profile, err = json.Marshal(notifyKeyCalls(agent)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.profile, profile, 0o644); err != nil {
		t.Fatal(err)
	}
	// The same, with the word that asks for a container's own key
	// namespace, as docs/containers.md makes it.
	var fields map[string]any
	if err := json.Unmarshal(profile, &fields); err != nil {
		t.Fatal(err)
	}
	meta, _ := fields["listenerMetadata"].(string)
	fields["listenerMetadata"] = strings.TrimSpace(meta + " ukeys:per-container")
	r.perContainer = filepath.Join(dir, "profile-per-container.json")
	r.writeJSON(r.perContainer, fields)

	config := filepath.Join(dir, "containerd.toml")
	if err := os.WriteFile(config, []byte(criConfig(dir, r.sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	log := &testutil.Buffer{}
	cmd := exec.Command(paths["containerd"], "--config", config)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("containerd's log:\n%s", log)
		}
	})
	testutil.Eventually(t, "containerd to serve", func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("containerd exited: %v\n%s", err, log)
		default:
		}
		c, err := net.Dial("unix", r.sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	// Pods go before containerd does: their shims and mounts outlive a
	// killed containerd.
	t.Cleanup(func() {
		r.crictlRun("rmp", "--force", "--all")
	})
	for _, img := range []string{pauseTar, keyprogTar} {
		if out, err := exec.Command(paths["ctr"], "--address", r.sock, "--namespace", "k8s.io", "images", "import", img).CombinedOutput(); err != nil {
			t.Fatalf("ctr images import %s: %v\n%s", img, err, out)
		}
	}
	return r
}

// podmanProfile is podman's default seccomp profile (Debian package
// golang-github-containers-common, which podman pulls in).
const podmanProfile = "/usr/share/containers/seccomp.json"

const (
	criPause   = "ukeys.test/pause:1"
	criKeyprog = "ukeys.test/keyprog:1"
)

// criConfig is containerd's configuration for the rig. Pods share the
// host's network (no CNI is needed); NoNewKeyring tells runc to join no
// kernel session keyring for them (the pods' key calls go to ukeys); restrict_oom_score_adj keeps the
// sandboxes' oom_score_adj (-998) within what the test's own process
// may set, as a node in a container must; the stream server takes a
// free port so that the host's containerd keeps its own.
func criConfig(dir, sock string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %[4]q
    restrict_oom_score_adj = true
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".cni]
      conf_dir = %[5]q
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "native"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          Root = %[6]q
          NoNewKeyring = true
`, filepath.Join(dir, "containerd-root"), filepath.Join(dir, "containerd-state"), sock, criPause,
		filepath.Join(dir, "cni"), filepath.Join(dir, "runc"))
}

// imageArchive writes a docker-archive (what docker save writes and ctr
// imports) of an image named name whose one layer holds the program at
// path as /NAME, its entrypoint, and returns the archive's path.
func imageArchive(t *testing.T, path, name string) string {
	t.Helper()
	prog, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Base(path)
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: base, Mode: 0o755, Size: int64(len(prog)), ModTime: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	lw.Write(prog)
	lw.Close()
	diff := sha256.Sum256(layer.Bytes())
	config, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/" + base}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff[:])}},
	})
	manifest, _ := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{name}, "Layers": []string{"layer.tar"}}})
	out := path + ".tar"
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		data []byte
	}{{"manifest.json", manifest}, {"config.json", config}, {"layer.tar", layer.Bytes()}} {
		if err := w.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		w.Write(e.data)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// crictlRun runs crictl against the rig's containerd and returns its
// standard output, trimmed.
func (r *criRig) crictlRun(args ...string) (string, error) {
	cmd := exec.Command(r.crictl, append([]string{"--runtime-endpoint", "unix://" + r.sock,
		"--image-endpoint", "unix://" + r.sock, "--timeout", "60s"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		err = fmt.Errorf("crictl %s: %v: %s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return strings.TrimSpace(string(out)), err
}

func (r *criRig) must(args ...string) string {
	r.t.Helper()
	out, err := r.crictlRun(args...)
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// criPod is a pod sandbox the rig runs, with the configuration it was
// made with (crictl create needs it again).
type criPod struct {
	id     string
	config string
}

// runPod runs a pod sandbox named name on the host's network.
func (r *criRig) runPod(name string) criPod {
	r.t.Helper()
	return r.runPodWith(name, "")
}

// runPodWith runs a pod sandbox named name on the host's network, its
// pause container under the seccomp profile at profile if not "".
func (r *criRig) runPodWith(name, profile string) criPod {
	r.t.Helper()
	config := filepath.Join(r.dir, "pod-"+name+".json")
	sc := map[string]any{"namespace_options": map[string]any{"network": 2}}
	if profile != "" {
		sc["seccomp"] = map[string]any{"profile_type": 2, "localhost_ref": profile}
	}
	r.writeJSON(config, map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "ukeys-test", "uid": fmt.Sprintf("%d-%s", os.Getpid(), name)},
		"log_directory": filepath.Join(r.dir, "logs", name),
		"linux":         map[string]any{"security_context": sc},
	})
	return criPod{id: r.must("runp", config), config: config}
}

// start creates and starts, in pod, a container named name that runs
// keyprog with args under the rig's profile, and returns its id.
func (r *criRig) start(pod criPod, name string, args ...string) string {
	r.t.Helper()
	return r.startWith(pod, r.profile, name, args...)
}

// startWith is start with the seccomp profile at profile.
func (r *criRig) startWith(pod criPod, profile, name string, args ...string) string {
	r.t.Helper()
	config := filepath.Join(r.dir, "container-"+pod.id[:12]+"-"+name+".json")
	r.writeJSON(config, map[string]any{
		"metadata": map[string]any{"name": name},
		"image":    map[string]any{"image": criKeyprog},
		"args":     args,
		"log_path": name + ".log",
		"linux": map[string]any{"security_context": map[string]any{
			"seccomp": map[string]any{"profile_type": 2, "localhost_ref": profile}}},
	})
	id := r.must("create", pod.id, config, pod.config)
	r.must("start", id)
	return id
}

// wait waits until container id has exited and returns what it wrote.
func (r *criRig) wait(id string) string {
	r.t.Helper()
	testutil.Eventually(r.t, "container "+id[:12]+" to exit", func() bool {
		if strings.Contains(r.must("inspect", "--output", "go-template", "--template", "{{.status.state}}", id), "EXITED") {
			return true
		}
		time.Sleep(50 * time.Millisecond) // each look is a crictl process
		return false
	})
	return r.logs(id)
}

// waitFor waits until container id has written want.
func (r *criRig) waitFor(id, want string) {
	r.t.Helper()
	testutil.Eventually(r.t, fmt.Sprintf("container %s to write %q", id[:12], want), func() bool {
		if strings.HasPrefix(r.logs(id), want) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
		return false
	})
}

// logged reports whether a line of the daemon's log holds each of words.
func (r *criRig) logged(words ...string) bool {
	for _, l := range strings.Split(r.log.String(), "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			return true
		}
	}
	return false
}

func (r *criRig) logs(id string) string {
	// The container's standard output is crictl's; crictl's own
	// warnings go to its standard error.
	out, _ := exec.Command(r.crictl, "--runtime-endpoint", "unix://"+r.sock, "logs", id).Output()
	return string(out)
}

func (r *criRig) writeJSON(path string, v any) {
	r.t.Helper()
	b, err := json.Marshal(v)
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		r.t.Fatal(err)
	}
}

// sessionKeyrings returns the lines of /proc/keys that name the session
// keyring an OCI runtime makes for a container or sandbox of one of ids:
// runc names it _ses.ID, crun ID.
func sessionKeyrings(ids ...string) []string {
	pk, err := os.ReadFile("/proc/keys")
	if err != nil {
		return nil
	}
	var made []string
	for _, l := range strings.Split(string(pk), "\n") {
		f := strings.Fields(l)
		if len(f) < 9 || f[7] != "keyring" {
			continue
		}
		desc := strings.TrimSuffix(f[8], ":")
		for _, id := range ids {
			if desc == "_ses."+id || desc == id {
				made = append(made, l)
			}
		}
	}
	return made
}
