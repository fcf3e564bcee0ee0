package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// cmdOCIRuntime runs an OCI runtime (runc by default) for a container
// engine that cannot name a seccomp agent itself: ukeyctl oci-runtime
// [--listener PATH] [--runtime RUNTIME] [--new-keyring] -- RUNTIME-ARGS.
// Docker before 23.0 passes a profile's SCMP_ACT_NOTIFY rules to the
// runtime but drops its listenerPath, and runc then refuses the container
// ("listenerPath is not set"). Registered as the engine's runtime, this
// command adds listenerPath to the bundle's config.json when the runtime
// is asked to create or run a container whose profile notifies and names
// no agent. Where that profile also keeps every key call from the kernel
// ([keyCallsHandedOver]), it tells runc or crun not to make the
// container a kernel session keyring (--no-new-keyring), which would
// only spend the host's key quota (runc#726, moby#22865); --new-keyring
// keeps the runtime's own way. Then it execs the runtime.
func (a *app) cmdOCIRuntime(args []string) {
	args = args[1:]
	listener, runtime, newKeyring := "/run/ukeys/agent.sock", "runc", false
flags:
	for len(args) > 0 {
		switch {
		case args[0] == "--":
			args = args[1:]
			break flags
		case len(args) >= 2 && args[0] == "--listener":
			listener, args = args[1], args[2:]
		case len(args) >= 2 && args[0] == "--runtime":
			runtime, args = args[1], args[2:]
		case args[0] == "--new-keyring":
			newKeyring, args = true, args[1:]
		default:
			break flags
		}
	}
	path, err := exec.LookPath(runtime)
	if err != nil {
		a.eprintf("ukeyctl oci-runtime: %v\n", err)
		a.exit(1)
	}
	if at, ok := commandAt(args); ok {
		handed, err := nameAgent(filepath.Join(bundleOf(args[at+1:]), "config.json"), listener)
		if err != nil {
			a.eprintf("ukeyctl oci-runtime: %v\n", err)
			a.exit(1)
		}
		if handed && !newKeyring && slices.Contains(keyringlessRuntimes, filepath.Base(runtime)) {
			args = withoutSessionKeyring(args, at)
		}
	}
	err = syscall.Exec(path, append([]string{runtime}, args...), os.Environ())
	a.eprintf("ukeyctl oci-runtime: %s: %v\n", path, err)
	a.exit(1)
}

// runtimeValueFlags are runc's global options that take a value as the
// next argument: their values are not the command.
var runtimeValueFlags = []string{"--root", "--log", "--log-format", "--criu"}

// keyringlessRuntimes are the runtimes whose create and run take
// --no-new-keyring.
var keyringlessRuntimes = []string{"runc", "crun"}

// commandAt finds, in a runtime's arguments, a create or run command
// after the global options, and returns its index; ok is false for the
// other commands.
func commandAt(args []string) (at int, ok bool) {
	i := 0
	for ; i < len(args); i++ {
		if slices.Contains(runtimeValueFlags, args[i]) {
			i++
			continue
		}
		if !strings.HasPrefix(args[i], "-") {
			break
		}
	}
	if i >= len(args) || args[i] != "create" && args[i] != "run" {
		return 0, false
	}
	return i, true
}

// bundleOf finds, in the arguments of a create or run command (those
// after the command's name), its bundle: its --bundle (or -b) option, or
// the working directory.
func bundleOf(args []string) string {
	for j := 0; j < len(args); j++ {
		a := args[j]
		if a == "--" {
			break
		}
		if (a == "--bundle" || a == "-b") && j+1 < len(args) {
			return args[j+1]
		}
		if v, ok := strings.CutPrefix(a, "--bundle="); ok {
			return v
		}
		if v, ok := strings.CutPrefix(a, "-b="); ok {
			return v
		}
	}
	return "."
}

// withoutSessionKeyring returns a runtime's arguments with
// --no-new-keyring given to the create or run command at index at: an
// option of the command, not a global one, so it goes right after the
// command's name, before the container's id (runc reads a command's
// options up to its first argument). Arguments that already carry it
// are returned as they are.
func withoutSessionKeyring(args []string, at int) []string {
	for _, a := range args[at+1:] {
		if a == "--" {
			break
		}
		if a == "--no-new-keyring" || strings.HasPrefix(a, "--no-new-keyring=") {
			return args
		}
	}
	return slices.Insert(slices.Clone(args), at+1, "--no-new-keyring")
}

// nameAgent sets linux.seccomp.listenerPath in the runtime configuration
// at path to listener, if its seccomp profile hands some call to an agent
// (SCMP_ACT_NOTIFY) and names none. Everything else keeps its meaning
// (numbers are carried as written), and a configuration with nothing to
// add is not rewritten. handed says whether the profile hands the key
// calls to the agent and lets none reach the kernel
// ([keyCallsHandedOver]), whether it named the agent itself or not.
func nameAgent(path, listener string) (handed bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	var config map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&config); err != nil {
		return false, errors.New(path + ": not a runtime configuration: " + err.Error())
	}
	linux, _ := config["linux"].(map[string]any)
	sc, _ := linux["seccomp"].(map[string]any)
	if sc == nil {
		return false, nil
	}
	handed = keyCallsHandedOver(sc)
	if p, _ := sc["listenerPath"].(string); p != "" {
		return handed, nil // an agent of the profile's own choosing
	}
	rules, _ := sc["syscalls"].([]any)
	if !slices.ContainsFunc(rules, func(r any) bool {
		rule, _ := r.(map[string]any)
		return rule["action"] == "SCMP_ACT_NOTIFY"
	}) {
		return handed, nil
	}
	sc["listenerPath"] = listener
	return handed, replaceJSON(path, config)
}

// keyCallsHandedOver reports whether the seccomp profile sc (a
// config.json's linux.seccomp, decoded) hands the key calls to an agent
// and lets none of them reach the kernel, so that the container has no
// use for a kernel session keyring of its own: every rule naming
// add_key, keyctl or request_key notifies or refuses it, each is
// notified or refused whatever its arguments (by a rule without
// conditions, or else by the default action), and one at least is
// notified. A container that might reach the kernel's keyrings keeps the
// one the runtime makes it, rather than share its caller's.
func keyCallsHandedOver(sc map[string]any) bool {
	kept := func(action any) bool {
		switch action {
		case "SCMP_ACT_NOTIFY", "SCMP_ACT_ERRNO", "SCMP_ACT_TRAP",
			"SCMP_ACT_KILL", "SCMP_ACT_KILL_THREAD", "SCMP_ACT_KILL_PROCESS":
			return true
		}
		return false
	}
	rules, _ := sc["syscalls"].([]any)
	notified := false
	for _, call := range keyCalls {
		whole := false // kept whatever its arguments
		for _, r := range rules {
			rule, _ := r.(map[string]any)
			names, _ := rule["names"].([]any)
			if !slices.Contains(names, any(call)) {
				continue
			}
			if !kept(rule["action"]) {
				return false
			}
			if args, _ := rule["args"].([]any); len(args) == 0 {
				whole = true
			}
			notified = notified || rule["action"] == "SCMP_ACT_NOTIFY"
		}
		if !whole {
			if !kept(sc["defaultAction"]) {
				return false
			}
			notified = notified || sc["defaultAction"] == "SCMP_ACT_NOTIFY"
		}
	}
	return notified
}

// replaceJSON writes config, as JSON, over the file at path.
func replaceJSON(path string, config map[string]any) error {
	out, err := json.Marshal(config)
	if err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	// Replaced whole, so that the runtime never reads half a file. The
	// temporary file is made new (O_EXCL, and O_NOFOLLOW for clarity): a
	// name planted there beforehand, a symbolic link to some other file
	// above all, is refused rather than written through.
	tmp := path + ".ukeys"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, st.Mode().Perm())
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return errors.New(tmp + ": already exists (a symbolic link or a file left behind): not writing through it; remove it and retry")
		}
		return err
	}
	_, err = f.Write(out)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
