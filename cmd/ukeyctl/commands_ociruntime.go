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
// [--listener PATH] [--runtime RUNTIME] -- RUNTIME-ARGS. Docker before
// 23.0 passes a profile's SCMP_ACT_NOTIFY rules to the runtime but drops
// its listenerPath, and runc then refuses the container ("listenerPath
// is not set"). Registered as the engine's runtime, this command adds
// listenerPath to the bundle's config.json when the runtime is asked to
// create or run a container whose profile notifies and names no agent,
// and then execs the runtime with its arguments unchanged.
func (a *app) cmdOCIRuntime(args []string) {
	args = args[1:]
	listener, runtime := "/run/ukeys/agent.sock", "runc"
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
		default:
			break flags
		}
	}
	path, err := exec.LookPath(runtime)
	if err != nil {
		a.eprintf("ukeyctl oci-runtime: %v\n", err)
		a.exit(1)
	}
	if bundle, ok := bundleOf(args); ok {
		if err := nameAgent(filepath.Join(bundle, "config.json"), listener); err != nil {
			a.eprintf("ukeyctl oci-runtime: %v\n", err)
			a.exit(1)
		}
	}
	err = syscall.Exec(path, append([]string{runtime}, args...), os.Environ())
	a.eprintf("ukeyctl oci-runtime: %s: %v\n", path, err)
	a.exit(1)
}

// runtimeValueFlags are runc's global options that take a value as the
// next argument: their values are not the command.
var runtimeValueFlags = []string{"--root", "--log", "--log-format", "--criu"}

// bundleOf finds, in a runtime's arguments, the bundle of a create or run
// command: its --bundle (or -b) option, or the working directory. ok is
// false for the other commands.
func bundleOf(args []string) (string, bool) {
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
		return "", false
	}
	for j := i + 1; j < len(args); j++ {
		a := args[j]
		if a == "--" {
			break
		}
		if (a == "--bundle" || a == "-b") && j+1 < len(args) {
			return args[j+1], true
		}
		if v, ok := strings.CutPrefix(a, "--bundle="); ok {
			return v, true
		}
		if v, ok := strings.CutPrefix(a, "-b="); ok {
			return v, true
		}
	}
	return ".", true
}

// nameAgent sets linux.seccomp.listenerPath in the runtime configuration
// at path to listener, if its seccomp profile hands some call to an agent
// (SCMP_ACT_NOTIFY) and names none. Everything else keeps its meaning
// (numbers are carried as written), and a configuration with nothing to
// add is not rewritten.
func nameAgent(path, listener string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var config map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&config); err != nil {
		return errors.New(path + ": not a runtime configuration: " + err.Error())
	}
	linux, _ := config["linux"].(map[string]any)
	sc, _ := linux["seccomp"].(map[string]any)
	if sc == nil {
		return nil
	}
	if p, _ := sc["listenerPath"].(string); p != "" {
		return nil // an agent of the profile's own choosing
	}
	rules, _ := sc["syscalls"].([]any)
	if !slices.ContainsFunc(rules, func(r any) bool {
		rule, _ := r.(map[string]any)
		return rule["action"] == "SCMP_ACT_NOTIFY"
	}) {
		return nil
	}
	sc["listenerPath"] = listener
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
