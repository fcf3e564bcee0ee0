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
		args := strings.Fields(c.args)
		at, ok := commandAt(args)
		bundle := ""
		if ok {
			bundle = bundleOf(args[at+1:])
		}
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
		handed             bool
	}{
		{"notifies, no agent", notify, "/run/agent.sock", true},
		{"its own agent", strings.Replace(notify, `"defaultAction"`, `"listenerPath":"/other.sock","defaultAction"`, 1), "/other.sock", true},
		{"no notify rule", strings.Replace(notify, "SCMP_ACT_NOTIFY", "SCMP_ACT_ERRNO", 1), "", false},
		{"no seccomp", `{"ociVersion":"1.0.2","linux":{}}`, "", false},
	} {
		path := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(path, []byte(c.config), 0o600); err != nil {
			t.Fatal(err)
		}
		handed, err := nameAgent(path, "/run/agent.sock")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if handed != c.handed {
			t.Errorf("%s: key calls handed over %v, want %v", c.name, handed, c.handed)
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
	if _, err := nameAgent(path, "/a"); err == nil {
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
		if _, err := nameAgent(path, "/a"); err != nil {
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

// --no-new-keyring is an option of runc's and crun's create and run, not
// a global one: it goes right after the command's name, whatever global
// options come before it (as containerd's shim passes them), and is not
// given twice.
func TestWithoutSessionKeyring(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"--root /r --log /l/log.json --log-format json --systemd-cgroup create --bundle /b --pid-file /p id",
			"--root /r --log /l/log.json --log-format json --systemd-cgroup create --no-new-keyring --bundle /b --pid-file /p id"},
		{"run -b /b id", "run --no-new-keyring -b /b id"},
		{"run id", "run --no-new-keyring id"},
		{"create --no-new-keyring --bundle /b id", "create --no-new-keyring --bundle /b id"},
		{"--debug run --no-new-keyring=true id", "--debug run --no-new-keyring=true id"},
	} {
		args := strings.Fields(c.args)
		at, ok := commandAt(args)
		if !ok {
			t.Fatalf("%q: no create or run found", c.args)
		}
		if got := strings.Join(withoutSessionKeyring(args, at), " "); got != c.want {
			t.Errorf("%q:\n got %q\nwant %q", c.args, got, c.want)
		}
		if strings.Join(args, " ") != c.args {
			t.Errorf("%q: the caller's arguments changed to %q", c.args, args)
		}
	}
}

// A container needs no kernel session keyring of its own only if none of
// its key calls can reach the kernel: each of them notified or refused
// whatever its arguments, and none let through by any rule.
func TestKeyCallsHandedOver(t *testing.T) {
	const all = `{"names":["add_key","keyctl","request_key"],"action":"SCMP_ACT_NOTIFY"}`
	for _, c := range []struct {
		name, profile string
		want          bool
	}{
		{"all three notified", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[` + all + `]}`, true},
		{"notified, refused by default", `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["keyctl"],"action":"SCMP_ACT_NOTIFY"}]}`, true},
		{"notified by default", `{"defaultAction":"SCMP_ACT_NOTIFY","syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW"}]}`, true},
		{"one notified, one refused", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["add_key","keyctl"],"action":"SCMP_ACT_NOTIFY"},{"names":["request_key"],"action":"SCMP_ACT_ERRNO"}]}`, true},
		{"request_key allowed", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["add_key","keyctl"],"action":"SCMP_ACT_NOTIFY"}]}`, false},
		{"keyctl allowed by a rule", `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[` + all + `,{"names":["keyctl"],"action":"SCMP_ACT_ALLOW"}]}`, false},
		{"keyctl notified for some arguments only", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["add_key","request_key"],"action":"SCMP_ACT_NOTIFY"},` +
			`{"names":["keyctl"],"action":"SCMP_ACT_NOTIFY","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]}]}`, false},
		{"refused, none notified", `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[]}`, false},
		{"logged", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[` + all + `,{"names":["add_key"],"action":"SCMP_ACT_LOG"}]}`, false},
	} {
		var sc map[string]any
		if err := json.Unmarshal([]byte(c.profile), &sc); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := keyCallsHandedOver(sc); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}

	// What ukeyctl seccomp-profile makes of a runtime's profile hands
	// them over, whatever that profile said of them.
	var profile map[string]any
	json.Unmarshal([]byte(`{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read","add_key"],"action":"SCMP_ACT_ALLOW"},`+
		`{"names":["keyctl"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":1,"op":"SCMP_CMP_EQ"}]}]}`), &profile)
	out, err := notifyProfile(profile, "/a")
	if err != nil {
		t.Fatal(err)
	}
	var sc map[string]any
	if err := json.Unmarshal(out, &sc); err != nil {
		t.Fatal(err)
	}
	if !keyCallsHandedOver(sc) {
		t.Errorf("seccomp-profile's profile does not hand the key calls over:\n%s", out)
	}
}

// ukeyctl oci-runtime gives runc (and crun) --no-new-keyring for a
// container whose profile hands the key calls over, and only then:
// not for another profile, not for another runtime, not when asked to
// keep the runtime's keyring (--new-keyring), not for other commands.
func TestOCIRuntimeNoNewKeyring(t *testing.T) {
	bin := binDir(t, "ukeyctl")
	handed := `{"ociVersion":"1.0.2","linux":{"seccomp":{"defaultAction":"SCMP_ACT_ALLOW",` +
		`"syscalls":[{"names":["add_key","keyctl","request_key"],"action":"SCMP_ACT_NOTIFY"}]}}}`
	allowed := strings.Replace(handed, `"request_key"`, `"personality"`, 1)
	for _, c := range []struct {
		name, runtime, config string
		flags, args, want     string
	}{
		{"runc, handed over", "runc", handed, "", "--root /r create --bundle B id", "--root /r create --no-new-keyring --bundle B id"},
		{"crun, handed over", "crun", handed, "", "run --bundle B id", "run --no-new-keyring --bundle B id"},
		{"request_key allowed", "runc", allowed, "", "create --bundle B id", "create --bundle B id"},
		{"asked to keep it", "runc", handed, "--new-keyring", "create --bundle B id", "create --bundle B id"},
		{"another runtime", "runsc", handed, "", "create --bundle B id", "create --bundle B id"},
		{"start", "runc", handed, "", "start id", "start id"},
	} {
		bundle := t.TempDir()
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(c.config), 0o600); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		said, runtime := filepath.Join(dir, "args"), filepath.Join(dir, c.runtime)
		if err := os.WriteFile(runtime, []byte("#!/bin/sh\necho \"$@\" > "+said+"\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"oci-runtime", "--listener", "/a", "--runtime", runtime}, strings.Fields(c.flags)...)
		args = append(append(args, "--"), strings.Fields(strings.ReplaceAll(c.args, "B", bundle))...)
		if out, err := exec.Command(filepath.Join(bin, "ukeyctl"), args...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, out)
		}
		got, _ := os.ReadFile(said)
		if want := strings.ReplaceAll(c.want, "B", bundle); strings.TrimSpace(string(got)) != want {
			t.Errorf("%s: the runtime got %q, want %q", c.name, strings.TrimSpace(string(got)), want)
		}
	}
}
