package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// manifestArgs returns the flow-style args lists of a manifest, in order:
// deploy/kubernetes writes each container's on one line, so that this
// test reads them without a YAML library.
func manifestArgs(t *testing.T, text string) [][]string {
	t.Helper()
	var all [][]string
	for _, m := range regexp.MustCompile(`(?m)^\s*args: (\[.*\])$`).FindAllStringSubmatch(text, -1) {
		var args []string
		if err := json.Unmarshal([]byte(m[1]), &args); err != nil {
			t.Fatalf("args %s: %v", m[1], err)
		}
		all = append(all, args)
	}
	return all
}

// flagValue returns the value after name in args.
func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	i := slices.Index(args, name)
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("no %s in %q", name, args)
	}
	return args[i+1]
}

// deploy/kubernetes agrees with ukeyd, ukeyctl and itself: the DaemonSet
// passes flags ukeyd has (it parses them, up to -h), the profile's
// listener is the agent's socket, the profile is written where the
// example pod's localhostProfile names it (under the kubelet's seccomp
// directory), the sockets are under the hostPath shared with the host,
// and the rolling update is the one -takeover auto is for.
func TestManifests(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ds, pod := read("ukeyd.yaml"), read("example-pod.yaml")
	args := manifestArgs(t, ds)
	if len(args) != 2 {
		t.Fatalf("%d args lists in ukeyd.yaml, want the initContainer's and ukeyd's", len(args))
	}
	profileArgs, daemonArgs := args[0], args[1]

	// ukeyd's flags, parsed for real: an unknown flag or bad value stops
	// it before -h.
	cmd := exec.Command(os.Args[0], append(append([]string{childArg}, daemonArgs...), "-h")...)
	out, _ := cmd.CombinedOutput()
	if strings.Contains(string(out), "not defined") || strings.Contains(string(out), "invalid") || !strings.Contains(string(out), "Usage") {
		t.Fatalf("ukeyd %q:\n%s", daemonArgs, out)
	}
	if !slices.Contains(daemonArgs, "-takeover=auto") || flagValue(t, daemonArgs, "-after-handover") != "wait" {
		t.Errorf("ukeyd's pod must take over if a daemon serves and wait once handed over: %q", daemonArgs)
	}
	if !strings.Contains(ds, "maxSurge: 1, maxUnavailable: 0") || !strings.Contains(ds, "path: /readyz") || !strings.Contains(ds, "hostPID: true") {
		t.Errorf("ukeyd.yaml lost its rolling update, readiness probe or hostPID")
	}
	agentSock := flagValue(t, daemonArgs, "-seccomp-agent")
	if l := flagValue(t, profileArgs, "--listener"); l != agentSock {
		t.Errorf("the profile's listener %s is not the agent's socket %s", l, agentSock)
	}
	for _, s := range []string{agentSock, flagValue(t, daemonArgs, "-socket")} {
		if filepath.Dir(s) != "/run/ukeys" {
			t.Errorf("%s is not under the hostPath /run/ukeys", s)
		}
	}
	if !strings.Contains(ds, "{path: /run/ukeys, type: DirectoryOrCreate}") || !strings.Contains(ds, "{name: run, mountPath: /run/ukeys}") {
		t.Errorf("/run/ukeys is not the host's in ukeyd.yaml")
	}

	// The profile's file on the host, and the pod's name for it.
	output := flagValue(t, profileArgs, "--output")
	m := regexp.MustCompile(`\{name: profiles, mountPath: (\S+)\}`).FindStringSubmatch(ds)
	h := regexp.MustCompile(`hostPath: \{path: (/var/lib/kubelet/seccomp/\S+), type: DirectoryOrCreate\}`).FindStringSubmatch(ds)
	if m == nil || h == nil || filepath.Dir(output) != m[1] {
		t.Fatalf("the profile %s is not written to the kubelet's seccomp directory (mount %v, hostPath %v)", output, m, h)
	}
	onHost := filepath.Join(h[1], filepath.Base(output))
	lp := regexp.MustCompile(`localhostProfile: (\S+)\}`).FindStringSubmatch(pod)
	if lp == nil || filepath.Join("/var/lib/kubelet/seccomp", lp[1]) != onHost {
		t.Errorf("the example pod's localhostProfile %v is not %s", lp, onHost)
	}
}
