package script

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden scripts with what their commands do now")

// Func runs one step of a script and returns what it did, masked as the
// script records it. It gets the test [Run] got, runs on its goroutine, and
// may fail it.
type Func func(t testing.TB, s *Step) Result

// Run runs the script in file: do for each step in order, then compares
// what it returned with what the file records, and reports each step
// that differs (t.Errorf) and goes on. With the -update flag it instead
// rewrites the file with what the steps returned, comments and commands
// unchanged. A file that does not parse fails the test.
func Run(t testing.TB, file string, do Func) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(string(data))
	if err != nil {
		t.Fatalf("%s:%v", file, err)
	}
	failed := false
	for _, s := range f.Steps {
		got := do(t, s)
		if *update {
			s.Want = got
			continue
		}
		if g, w := got.String(), s.Want.String(); g != w {
			failed = true
			t.Errorf("%s:%d:\n$ %s\n--- want\n%s--- got\n%s", file, s.Line, s.Cmd, w, g)
		}
	}
	if *update {
		if out := []byte(f.String()); !bytes.Equal(out, data) {
			if err := os.WriteFile(file, out, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	} else if failed {
		t.Logf("run with -update to rewrite %s", file)
	}
}
