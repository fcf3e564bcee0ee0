package main

import (
	"encoding/json"
	"slices"
	"testing"
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
