package main

import (
	"encoding/json"
	"io"
	"os"
	"slices"
)

// keyCalls are the system calls a profile hands to ukeyd's agent.
var keyCalls = []string{"add_key", "keyctl", "request_key"}

// cmdSeccompProfile turns a container runtime's seccomp profile (Docker's
// or podman's default one, say, in the OCI/Docker JSON form) into one
// that hands the key system calls to ukeyd's agent: ukeyctl
// seccomp-profile [--listener PATH] [PROFILE]. Every rule keeps what it
// says of every other call; add_key, keyctl and request_key leave the
// rules that named them and get one of their own, SCMP_ACT_NOTIFY, and
// listenerPath names the agent. The profile is read from PROFILE or
// standard input and written to standard output.
func (a *app) cmdSeccompProfile(args []string) {
	args = args[1:]
	listener := "/run/ukeys/agent.sock"
	if len(args) >= 2 && args[0] == "--listener" {
		listener, args = args[1], args[2:]
	}
	if len(args) > 1 {
		a.extraUsage("seccomp-profile")
	}
	var in io.Reader = a.stdin
	if len(args) == 1 {
		f, err := os.Open(args[0])
		if err != nil {
			a.fail(args[0], err)
		}
		defer f.Close()
		in = f
	}
	var profile map[string]any
	dec := json.NewDecoder(in)
	dec.UseNumber() // a rule's argument values are 64-bit: carried as written
	if err := dec.Decode(&profile); err != nil {
		a.eprintf("ukeyctl seccomp-profile: not a seccomp profile: %v\n", err)
		a.exit(1)
	}
	out, err := notifyProfile(profile, listener)
	if err != nil {
		a.eprintf("ukeyctl seccomp-profile: %v\n", err)
		a.exit(1)
	}
	a.printf("%s\n", out)
}

// notifyProfile rewrites profile as cmdSeccompProfile says.
func notifyProfile(profile map[string]any, listener string) ([]byte, error) {
	rules, _ := profile["syscalls"].([]any)
	kept := make([]any, 0, len(rules)+1)
	for _, r := range rules {
		rule, ok := r.(map[string]any)
		if !ok {
			kept = append(kept, r)
			continue
		}
		if names, ok := rule["names"].([]any); ok {
			left := slices.DeleteFunc(slices.Clone(names), func(n any) bool {
				s, _ := n.(string)
				return slices.Contains(keyCalls, s)
			})
			if len(left) == 0 {
				continue // a rule of the key calls alone
			}
			rule["names"] = left
		}
		kept = append(kept, rule)
	}
	names := make([]any, len(keyCalls))
	for i, n := range keyCalls {
		names[i] = n
	}
	kept = append(kept, map[string]any{"names": names, "action": "SCMP_ACT_NOTIFY"})
	profile["syscalls"] = kept
	profile["listenerPath"] = listener
	return json.MarshalIndent(profile, "", "\t")
}
