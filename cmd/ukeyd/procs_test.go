package main

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/ukeys/ukeys/internal/procs"
)

// The daemon's Go processors follow -procs: a count as given, Go's own
// default, GOMAXPROCS where it is set, and otherwise one more than Go's
// default (procs.Spare), as ukeyctl status reports them.
func TestProcs(t *testing.T) {
	dir := t.TempDir()
	status := func(i int, env, args []string) int {
		t.Helper()
		socket := filepath.Join(dir, fmt.Sprintf("ukeyd%d.sock", i))
		startChild(t, socket, childOpts{env: append([]string{"GOMAXPROCS="}, env...), args: args})
		n, err := strconv.Atoi(statusField(t, socket, "procs"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	goDefault := status(0, []string{"UKEYD_PROCS=go"}, nil)
	if goDefault < 1 || goDefault > runtime.NumCPU() {
		t.Fatalf("with -procs go the daemon runs %d processors on %d", goDefault, runtime.NumCPU())
	}
	for i, tc := range []struct {
		env, args []string
		want      int
	}{
		{args: []string{"-procs", "5"}, want: 5},
		{want: procs.Spare(goDefault, runtime.NumCPU())},
		{env: []string{"GOMAXPROCS=1"}, want: 1},
		{env: []string{"GOMAXPROCS=1"}, args: []string{"-procs", "4"}, want: 4},
	} {
		if got := status(i+1, tc.env, tc.args); got != tc.want {
			t.Errorf("%v %v: procs %d, want %d", tc.env, tc.args, got, tc.want)
		}
	}
}
