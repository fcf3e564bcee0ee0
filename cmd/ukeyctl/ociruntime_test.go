package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The bundle is found for create and run, as containerd's shim and
// runc's own users pass it, and only for them.
func TestBundleOf(t *testing.T) {
	for _, c := range []struct {
		args   string
		bundle string
		ok     bool
	}{
		{"--root /r --log /l/log.json --log-format json create --bundle /b --pid-file /p id", "/b", true},
		{"create -b /b id", "/b", true},
		{"--debug run --bundle=/b id", "/b", true},
		{"run id", ".", true},
		{"--root create start id", "", false}, // "create" is --root's value
		{"--root /r start id", "", false},
		{"delete --force id", "", false},
		{"create -- --bundle /b", ".", true},
		{"", "", false},
	} {
		bundle, ok := bundleOf(strings.Fields(c.args))
		if bundle != c.bundle || ok != c.ok {
			t.Errorf("%q: %q %v, want %q %v", c.args, bundle, ok, c.bundle, c.ok)
		}
	}
}

// listenerPath is added where a profile notifies and names no agent, and
// nowhere else; the rest of the configuration keeps its values, 64-bit
// numbers included.
func TestNameAgent(t *testing.T) {
	const notify = `{"ociVersion":"1.0.2","process":{"args":["/p"]},"linux":{"seccomp":{"defaultAction":"SCMP_ACT_ALLOW",
		"syscalls":[{"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":18446744073709551615,"op":"SCMP_CMP_EQ"}]},
		{"names":["add_key","keyctl","request_key"],"action":"SCMP_ACT_NOTIFY"}]}}}`
	for _, c := range []struct {
		name, config, want string
	}{
		{"notifies, no agent", notify, "/run/agent.sock"},
		{"its own agent", strings.Replace(notify, `"defaultAction"`, `"listenerPath":"/other.sock","defaultAction"`, 1), "/other.sock"},
		{"no notify rule", strings.Replace(notify, "SCMP_ACT_NOTIFY", "SCMP_ACT_ERRNO", 1), ""},
		{"no seccomp", `{"ociVersion":"1.0.2","linux":{}}`, ""},
	} {
		path := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(path, []byte(c.config), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := nameAgent(path, "/run/agent.sock"); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, _ := os.ReadFile(path)
		var got struct {
			Linux struct {
				Seccomp struct {
					ListenerPath string `json:"listenerPath"`
					Syscalls     []struct {
						Args []struct {
							Value uint64 `json:"value"`
						} `json:"args"`
					} `json:"syscalls"`
				} `json:"seccomp"`
			} `json:"linux"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, b)
		}
		if got.Linux.Seccomp.ListenerPath != c.want {
			t.Errorf("%s: listenerPath %q, want %q", c.name, got.Linux.Seccomp.ListenerPath, c.want)
		}
		if c.want == "" && string(b) != c.config {
			t.Errorf("%s: rewritten with nothing to add:\n%s", c.name, b)
		}
		if s := got.Linux.Seccomp.Syscalls; len(s) > 0 && s[0].Args[0].Value != 1<<64-1 {
			t.Errorf("%s: a 64-bit value became %d", c.name, s[0].Args[0].Value)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", c.name, st.Mode())
		}
	}
	// Not a configuration: refused, and left alone.
	path := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(path, []byte("{"), 0o600)
	if err := nameAgent(path, "/a"); err == nil {
		t.Fatal("a damaged configuration was accepted")
	}
}

// Whatever the configuration file holds, nameAgent never panics, and
// what it writes is JSON.
func FuzzNameAgent(f *testing.F) {
	f.Add([]byte(`{"linux":{"seccomp":{"syscalls":[{"action":"SCMP_ACT_NOTIFY"}]}}}`))
	f.Add([]byte(`{"linux":{"seccomp":{"listenerPath":7,"syscalls":[1,{"action":"SCMP_ACT_NOTIFY"}]}}}`))
	f.Add([]byte(`{"linux":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := nameAgent(path, "/a"); err != nil {
			return
		}
		out, _ := os.ReadFile(path)
		if string(out) != string(b) && !json.Valid(out) {
			t.Fatalf("%q became %q", b, out)
		}
	})
}

// A name planted at the temporary config.json.ukeys (here a symbolic
// link to a file of the runtime's user's) is never written through:
// oci-runtime refuses with a message naming it, runs no runtime, and
// the link's target and the configuration are left as they were.
func TestOCIRuntimeRefusesPlantedTemporary(t *testing.T) {
	bin := binDir(t, "ukeyctl")
	bundle := t.TempDir()
	const config = `{"ociVersion":"1.0.2","linux":{"seccomp":{"defaultAction":"SCMP_ACT_ALLOW",` +
		`"syscalls":[{"names":["add_key","keyctl","request_key"],"action":"SCMP_ACT_NOTIFY"}]}}}`
	path := filepath.Join(bundle, "config.json")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("the victim's own file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, path+".ukeys"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	marker, runtime := filepath.Join(dir, "ran"), filepath.Join(dir, "runtime")
	if err := os.WriteFile(runtime, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "ukeyctl"), "oci-runtime", "--runtime", runtime, "--", "create", "--bundle", bundle, "id")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Errorf("oci-runtime succeeded with a link planted at config.json.ukeys:\n%s", out)
	}
	if !strings.Contains(string(out), "config.json.ukeys") {
		t.Errorf("the refusal does not name the planted file:\n%s", out)
	}
	if b, _ := os.ReadFile(victim); string(b) != "the victim's own file\n" {
		t.Errorf("the link's target was written through: %q", b)
	}
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
		t.Errorf("config.json is no longer the regular file it was: %v %v", st.Mode(), err)
	} else if b, _ := os.ReadFile(path); string(b) != config {
		t.Errorf("config.json changed: %s", b)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the runtime ran after the refusal")
	}
}
