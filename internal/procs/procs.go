package procs

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Setting is a -procs value.
type Setting struct {
	mode mode
	n    int
}

type mode uint8

const (
	auto  mode = iota // Spare's rule, unless GOMAXPROCS is set
	goDef             // Go's own default
	fixed             // n
)

// Auto is the default setting: [Spare]'s count, unless GOMAXPROCS is set
// in the environment.
var Auto = Setting{mode: auto}

// Parse reads "auto", "go" (Go's default: as many as the processors the
// process may use, or its CPU quota) or a count of at least 1.
func Parse(s string) (Setting, error) {
	switch s = strings.TrimSpace(s); s {
	case "auto":
		return Auto, nil
	case "go":
		return Setting{mode: goDef}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return Setting{}, fmt.Errorf("%q is not auto, go, or a count of processors", s)
	}
	return Setting{mode: fixed, n: n}, nil
}

// String gives the setting as [Parse] reads it.
func (s Setting) String() string {
	switch s.mode {
	case auto:
		return "auto"
	case goDef:
		return "go"
	}
	return strconv.Itoa(s.n)
}

// Spare is the automatic count: one more than Go's default, when that
// default is every processor the process may use (cpus), or Go's
// default, when it is lower because of a CPU quota.
func Spare(goDefault, cpus int) int {
	if goDefault < cpus {
		return goDefault
	}
	return goDefault + 1
}

// Apply sets GOMAXPROCS as s says, and returns the count in force. It is
// called once, at start, before the goroutines it is for exist.
func (s Setting) Apply() int {
	switch {
	case s.mode == fixed:
		runtime.GOMAXPROCS(s.n)
	case s.mode == auto && os.Getenv("GOMAXPROCS") == "":
		runtime.GOMAXPROCS(Spare(runtime.GOMAXPROCS(0), runtime.NumCPU()))
	}
	return runtime.GOMAXPROCS(0)
}
