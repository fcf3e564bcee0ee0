package main

import (
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
)

// keyCalls are the system calls a profile hands to ukeyd's agent.
var keyCalls = []string{"add_key", "keyctl", "request_key"}

// cmdSeccompProfile turns a container runtime's seccomp profile (Docker's
// or podman's default one, say, in the OCI/Docker JSON form) into one
// that hands the key system calls to ukeyd's agent: ukeyctl
// seccomp-profile [--listener PATH] [--output FILE] [--base default |
// PROFILE]. Every rule keeps what it says of every other call; add_key,
// keyctl and request_key leave the rules that named them and get one of
// their own, SCMP_ACT_NOTIFY, and listenerPath names the agent. The
// profile is read from PROFILE or standard input, or is [baseProfile]
// (--base default), and written to standard output or FILE (replaced
// whole, as an image with no shell to redirect needs: a DaemonSet's
// initContainer).
func (a *app) cmdSeccompProfile(args []string) {
	const usage = "seccomp-profile"
	args = args[1:]
	listener, output, base := "/run/ukeys/agent.sock", "", ""
	for len(args) >= 2 && strings.HasPrefix(args[0], "--") {
		switch args[0] {
		case "--listener":
			listener = args[1]
		case "--output":
			output = args[1]
		case "--base":
			base = args[1]
		default:
			a.extraUsage(usage)
		}
		args = args[2:]
	}
	if len(args) > 1 || base != "" && (base != "default" || len(args) > 0) {
		a.extraUsage(usage)
	}
	var in io.Reader = a.stdin
	if base != "" {
		in = strings.NewReader(baseProfile())
	} else if len(args) == 1 {
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
	if output == "" {
		a.printf("%s\n", out)
		return
	}
	// Written beside and renamed: a runtime starting a container never
	// reads half a profile.
	tmp := output + ".tmp"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o644); err != nil {
		a.fail(tmp, err)
	}
	if err := os.Rename(tmp, output); err != nil {
		os.Remove(tmp)
		a.fail(output, err)
	}
}

// refusedCalls are the calls [baseProfile] refuses: the kernel's
// modules, kexec and reboot, swap, the clock, mounts and the root,
// other processes' memory and tracing, BPF and perf, raw I/O ports and
// file handles, new namespaces, and accounting. Most need a capability a pod's container lacks anyway; refused here,
// they stay refused for one granted it.
var refusedCalls = []string{
	"acct", "adjtimex", "bpf", "clock_adjtime", "clock_settime",
	"create_module", "delete_module", "finit_module", "fsconfig", "fsmount", "fsopen",
	"fspick", "get_kernel_syms", "init_module", "ioperm", "iopl", "kcmp",
	"kexec_file_load", "kexec_load", "lookup_dcookie", "mount", "mount_setattr",
	"move_mount", "nfsservctl", "open_by_handle_at", "open_tree", "perf_event_open",
	"pivot_root", "process_vm_readv", "process_vm_writev", "ptrace", "query_module",
	"quotactl", "reboot", "settimeofday", "swapoff", "swapon", "sysfs", "umount",
	"umount2", "unshare", "uselib", "vm86", "vm86old",
}

// baseProfile is ukeyctl's own base for --base default, for a node
// whose runtime has no profile file to start from (containerd builds
// its RuntimeDefault in): every call allowed but [refusedCalls], which
// fail with EPERM. It is weaker than a runtime's default, which allows
// a list of calls and refuses the rest, and is for where nothing better
// is at hand (docs/containers.md, Kubernetes).
func baseProfile() string {
	b, _ := json.Marshal(map[string]any{
		"defaultAction": "SCMP_ACT_ALLOW",
		"syscalls":      []any{map[string]any{"names": refusedCalls, "action": "SCMP_ACT_ERRNO", "errnoRet": 1}},
	})
	return string(b)
}

// pipeCalls are the calls that make and set up a notification pipe,
// which the agent serves too where the profile lets it have them.
var pipeCalls = []string{"pipe2", "ioctl"}

// The arguments that make pipe2 and ioctl a notification pipe's:
// pipe2's O_NOTIFICATION_PIPE (O_EXCL) in its flags, and the watch
// queue's two ioctl commands.
const (
	oNotificationPipe   = 0x80
	iocWatchQueueSize   = 0x5760
	iocWatchQueueFilter = 0x5761
)

// notifyProfile rewrites profile as cmdSeccompProfile says. Where every
// rule that names pipe2 and ioctl allows them whatever their arguments
// (as Docker's and podman's defaults do), or the default allows every
// call, a pipe2 that asks for a notification pipe and the watch queue's
// ioctls go to the agent too, and every other pipe2 and ioctl stays
// allowed; listenerMetadata then says so (ukeys:notify), so that the
// agent serves the container's key notifications. Otherwise the
// profile's pipe2 and ioctl rules are left as they are, and the
// container's programs are told there are no notifications.
func notifyProfile(profile map[string]any, listener string) ([]byte, error) {
	rules, _ := profile["syscalls"].([]any)
	defaultAllows := profile["defaultAction"] == "SCMP_ACT_ALLOW"
	// Each pipe call: allowed by a rule with no conditions (allowed), or
	// named by a rule that says something else of it (other).
	allowed, other := map[string]bool{}, map[string]bool{}
	for _, r := range rules {
		rule, ok := r.(map[string]any)
		if !ok {
			continue
		}
		names, _ := rule["names"].([]any)
		plain := rule["action"] == "SCMP_ACT_ALLOW" && isEmpty(rule["args"]) &&
			isEmpty(rule["includes"]) && isEmpty(rule["excludes"])
		for _, n := range names {
			if s, _ := n.(string); slices.Contains(pipeCalls, s) {
				if plain {
					allowed[s] = true
				} else {
					other[s] = true
				}
			}
		}
	}
	pipes := true
	for _, c := range pipeCalls {
		pipes = pipes && !other[c] && (allowed[c] || defaultAllows)
	}
	kept := make([]any, 0, len(rules)+7)
	for _, r := range rules {
		rule, ok := r.(map[string]any)
		if !ok {
			kept = append(kept, r)
			continue
		}
		if names, ok := rule["names"].([]any); ok {
			left := slices.DeleteFunc(slices.Clone(names), func(n any) bool {
				s, _ := n.(string)
				return slices.Contains(keyCalls, s) || pipes && slices.Contains(pipeCalls, s)
			})
			if len(left) == 0 {
				continue // a rule of the calls the agent takes alone
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
	if pipes {
		arg := func(op string, value, two uint64) []any {
			a := map[string]any{"index": 1, "value": value, "op": op}
			if op == "SCMP_CMP_MASKED_EQ" {
				a["valueTwo"] = two // MASKED_EQ: value is the mask, valueTwo the datum
			}
			return []any{a}
		}
		rule := func(call, action string, args []any) map[string]any {
			return map[string]any{"names": []any{call}, "action": action, "args": args}
		}
		kept = append(kept,
			rule("pipe2", "SCMP_ACT_NOTIFY", arg("SCMP_CMP_MASKED_EQ", oNotificationPipe, oNotificationPipe)),
			rule("pipe2", "SCMP_ACT_ALLOW", arg("SCMP_CMP_MASKED_EQ", oNotificationPipe, 0)),
			rule("ioctl", "SCMP_ACT_NOTIFY", arg("SCMP_CMP_EQ", iocWatchQueueSize, 0)),
			rule("ioctl", "SCMP_ACT_NOTIFY", arg("SCMP_CMP_EQ", iocWatchQueueFilter, 0)),
			rule("ioctl", "SCMP_ACT_ALLOW", arg("SCMP_CMP_LT", iocWatchQueueSize, 0)),
			rule("ioctl", "SCMP_ACT_ALLOW", arg("SCMP_CMP_GT", iocWatchQueueFilter, 0)),
		)
		meta, _ := profile["listenerMetadata"].(string)
		if !slices.Contains(strings.Fields(meta), notifyMetadata) {
			profile["listenerMetadata"] = strings.TrimSpace(meta + " " + notifyMetadata)
		}
	}
	profile["syscalls"] = kept
	profile["listenerPath"] = listener
	return json.MarshalIndent(profile, "", "\t")
}

// notifyMetadata is agent.NotifyMetadata, which ukeyctl does not link.
const notifyMetadata = "ukeys:notify"

// isEmpty reports whether a profile's field is absent or empty.
func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}
