package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A UKEYD_* value that does not parse, or a bound below one, stops the
// daemon with a message naming it, instead of leaving a default in force.
func TestBadSettingsAreRejected(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "ukeyd.sock")
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"UKEYD_MAXKEYS=two hundred"}, nil, `UKEYD_MAXKEYS="two hundred" is not an integer`},
		{[]string{"UKEYD_GC_DELAY=5"}, nil, `UKEYD_GC_DELAY="5" is not a duration`},
		{[]string{"UKEYD_UPCALL_TIMEOUT=soon"}, nil, `UKEYD_UPCALL_TIMEOUT="soon"`},
		{nil, []string{"-max-conns-per-uid", "0"}, "-max-conns-per-uid 0: must be at least 1"},
		{[]string{"UKEYD_MEMORY_LIMIT=lots"}, nil, `-memory-limit "lots" is not auto, off, or a size`},
		{nil, []string{"-memory-limit", "0MiB"}, `-memory-limit "0MiB"`},
		{nil, []string{"-procs", "0"}, `-procs "0" is not auto, go, or a count of processors`},
		{[]string{"UKEYD_PROCS=many"}, nil, `-procs "many"`},
		{nil, []string{"-after-handover", "linger"}, `-after-handover "linger": not exit or wait`},
		{[]string{"UKEYD_TAKEOVER=sometimes"}, nil, `UKEYD_TAKEOVER="sometimes": not true, false or auto`},
		{nil, []string{"-takeover=sometimes"}, `not true, false or auto`},
		{nil, []string{"-takeover", "auto"}, `unexpected argument "auto" (-takeover=auto, not -takeover auto)`},
	} {
		cmd := exec.Command(os.Args[0], append([]string{childArg, "-socket", socket, "-request-key", ""}, tc.args...)...)
		cmd.Env = append(os.Environ(), tc.env...)
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v %v: exit %d (%v), output %q; want exit 2 and %q", tc.env, tc.args, cmd.ProcessState.ExitCode(), err, out, tc.want)
		}
		if _, err := os.Lstat(socket); err == nil {
			t.Fatalf("%v %v: the daemon listened", tc.env, tc.args)
		}
	}
}
