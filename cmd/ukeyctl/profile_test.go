package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/agent"
)

// A runtime's profile keeps what it says of every other call; the key
// calls leave the rules that named them (here the profile's refusal of
// keyctl, and a rule that allowed add_key with others), get a rule of
// their own that hands them to the agent, and the agent is named.
func TestNotifyProfile(t *testing.T) {
	in := `{
	"defaultAction": "SCMP_ACT_ERRNO",
	"defaultErrnoRet": 1,
	"architectures": ["SCMP_ARCH_X86_64"],
	"syscalls": [
		{"names": ["read", "write", "add_key"], "action": "SCMP_ACT_ALLOW"},
		{"names": ["keyctl"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
		{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 2114060288, "op": "SCMP_CMP_MASKED_EQ"}]}
	]
}`
	var profile map[string]any
	if err := json.Unmarshal([]byte(in), &profile); err != nil {
		t.Fatal(err)
	}
	out, err := notifyProfile(profile, "/run/ukeys/agent.sock")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		DefaultAction   string   `json:"defaultAction"`
		DefaultErrnoRet int      `json:"defaultErrnoRet"`
		Architectures   []string `json:"architectures"`
		ListenerPath    string   `json:"listenerPath"`
		Syscalls        []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
			Args   []any    `json:"args"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.DefaultAction != "SCMP_ACT_ERRNO" || got.DefaultErrnoRet != 1 || !slices.Equal(got.Architectures, []string{"SCMP_ARCH_X86_64"}) {
		t.Errorf("the profile's defaults changed:\n%s", out)
	}
	if got.ListenerPath != "/run/ukeys/agent.sock" {
		t.Errorf("listenerPath %q", got.ListenerPath)
	}
	if len(got.Syscalls) != 3 {
		t.Fatalf("%d rules, want 3:\n%s", len(got.Syscalls), out)
	}
	if !slices.Equal(got.Syscalls[0].Names, []string{"read", "write"}) || got.Syscalls[0].Action != "SCMP_ACT_ALLOW" {
		t.Errorf("first rule: %+v", got.Syscalls[0])
	}
	if !slices.Equal(got.Syscalls[1].Names, []string{"clone"}) || len(got.Syscalls[1].Args) != 1 {
		t.Errorf("the clone rule lost its arguments: %+v", got.Syscalls[1])
	}
	if last := got.Syscalls[2]; !slices.Equal(last.Names, []string{"add_key", "keyctl", "request_key"}) || last.Action != "SCMP_ACT_NOTIFY" {
		t.Errorf("the key calls' rule: %+v", last)
	}
}

// A profile that allows pipe2 and ioctl whatever their arguments (as
// Docker's default does) hands the agent a pipe2 that asks for a
// notification pipe and the watch queue's two ioctls, allows every other
// pipe2 and ioctl, and says so in listenerMetadata; one that says
// something else of ioctl (a condition) keeps its rules, and the agent
// is not told.
func TestNotifyProfilePipes(t *testing.T) {
	type rule struct {
		Names  []string         `json:"names"`
		Action string           `json:"action"`
		Args   []map[string]any `json:"args"`
	}
	rewrite := func(in string) (rules []rule, meta string) {
		t.Helper()
		var profile map[string]any
		if err := json.Unmarshal([]byte(in), &profile); err != nil {
			t.Fatal(err)
		}
		out, err := notifyProfile(profile, "/run/ukeys/agent.sock")
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Meta     string `json:"listenerMetadata"`
			Syscalls []rule `json:"syscalls"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		return got.Syscalls, got.Meta
	}
	rules, meta := rewrite(`{"defaultAction": "SCMP_ACT_ERRNO", "listenerMetadata": "mine",
		"syscalls": [{"names": ["read", "pipe2", "ioctl"], "action": "SCMP_ACT_ALLOW"}]}`)
	if meta != "mine "+agent.NotifyMetadata {
		t.Errorf("listenerMetadata %q", meta)
	}
	var says []string
	for _, r := range rules {
		s := strings.Join(r.Names, ",") + " " + r.Action
		for _, a := range r.Args {
			s += fmt.Sprintf(" %v %v %v", a["op"], a["value"], a["valueTwo"])
		}
		says = append(says, s)
	}
	want := []string{
		"read SCMP_ACT_ALLOW",
		"add_key,keyctl,request_key SCMP_ACT_NOTIFY",
		"pipe2 SCMP_ACT_NOTIFY SCMP_CMP_MASKED_EQ 128 128",
		"pipe2 SCMP_ACT_ALLOW SCMP_CMP_MASKED_EQ 128 0",
		"ioctl SCMP_ACT_NOTIFY SCMP_CMP_EQ 22368 <nil>",
		"ioctl SCMP_ACT_NOTIFY SCMP_CMP_EQ 22369 <nil>",
		"ioctl SCMP_ACT_ALLOW SCMP_CMP_LT 22368 <nil>",
		"ioctl SCMP_ACT_ALLOW SCMP_CMP_GT 22369 <nil>",
	}
	if !slices.Equal(says, want) {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(says, "\n"), strings.Join(want, "\n"))
	}

	// The default allows all: the same rules.
	if rules, meta := rewrite(`{"defaultAction": "SCMP_ACT_ALLOW"}`); meta != agent.NotifyMetadata || len(rules) != 7 {
		t.Errorf("a profile that allows all: %d rules, listenerMetadata %q", len(rules), meta)
	}
	// ioctl under a condition of the profile's own: left as it is.
	rules, meta = rewrite(`{"defaultAction": "SCMP_ACT_ERRNO",
		"syscalls": [{"names": ["read", "pipe2"], "action": "SCMP_ACT_ALLOW"},
		{"names": ["ioctl"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 1, "value": 21505, "op": "SCMP_CMP_EQ"}]}]}`)
	if meta != "" || len(rules) != 3 || !slices.Equal(rules[0].Names, []string{"read", "pipe2"}) || !slices.Equal(rules[1].Names, []string{"ioctl"}) {
		t.Errorf("a profile with its own ioctl condition: %+v, listenerMetadata %q", rules, meta)
	}
	// Neither allowed: the container has no pipes to be given.
	if _, meta := rewrite(`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}]}`); meta != "" {
		t.Errorf("a profile without pipe2: listenerMetadata %q", meta)
	}
}

// --base default (a node whose runtime has no profile file) makes a
// profile that allows what it does not refuse, refuses the dangerous
// calls, and hands the key calls over; --output writes it to a file, for
// an image that has no shell to redirect; a PROFILE beside --base, or
// another base, is a usage error.
func TestSeccompProfileBaseDefault(t *testing.T) {
	out := filepath.Join(t.TempDir(), "keys.json")
	if r := run("ukeyctl", "", "seccomp-profile", "--listener", "/run/x/agent.sock", "--output", out, "--base", "default"); r.Code != 0 || r.Stdout != "" {
		t.Fatalf("%+v", r)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var sc map[string]any
	if err := json.Unmarshal(b, &sc); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if sc["defaultAction"] != "SCMP_ACT_ALLOW" || sc["listenerPath"] != "/run/x/agent.sock" || !keyCallsHandedOver(sc) {
		t.Errorf("profile:\n%s", b)
	}
	for _, c := range []string{"kexec_load", "init_module", "bpf", "ptrace", "mount"} {
		if !strings.Contains(string(b), `"`+c+`"`) {
			t.Errorf("%s is not refused:\n%s", c, b)
		}
	}
	for _, args := range [][]string{{"--base", "default", "/x.json"}, {"--base", "strict"}, {"--outptu", "x"}} {
		if r := run("ukeyctl", "", append([]string{"seccomp-profile"}, args...)...); r.Code != 2 {
			t.Errorf("%q: %+v", args, r)
		}
	}
}
