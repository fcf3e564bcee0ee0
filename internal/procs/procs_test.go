package procs

import (
	"runtime"
	"testing"
)

func TestSpare(t *testing.T) {
	for _, c := range []struct{ goDefault, cpus, want int }{
		{1, 1, 2},
		{2, 2, 3},
		{64, 64, 65},
		{2, 8, 2}, // a quota of two processors on eight: no more threads than it allows
		{1, 2, 1},
	} {
		if got := Spare(c.goDefault, c.cpus); got != c.want {
			t.Errorf("Spare(%d, %d) = %d, want %d", c.goDefault, c.cpus, got, c.want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, s := range []string{"auto", "go", "1", "3", " 8 "} {
		set, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		if back, err := Parse(set.String()); err != nil || back != set {
			t.Fatalf("Parse(%q).String() = %q does not read back", s, set.String())
		}
	}
	for _, s := range []string{"", "0", "-1", "two", "1.5", "auto1"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) succeeded", s)
		}
	}
}

func TestApply(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	set, _ := Parse("3")
	if got := set.Apply(); got != 3 || runtime.GOMAXPROCS(0) != 3 {
		t.Fatalf("Apply of 3 gives %d, GOMAXPROCS %d", got, runtime.GOMAXPROCS(0))
	}
	before := runtime.GOMAXPROCS(0)
	if got := (Setting{mode: goDef}).Apply(); got != before {
		t.Fatalf("Apply of go changed GOMAXPROCS from %d to %d", before, got)
	}
	t.Setenv("GOMAXPROCS", "2")
	if got := Auto.Apply(); got != before {
		t.Fatalf("auto changed GOMAXPROCS from %d to %d although GOMAXPROCS is set", before, got)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"auto", "go", "1", "0", "-3", "99999999999999999999", " 4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := Parse(s)
		if err != nil {
			return
		}
		if set.mode == fixed && set.n < 1 {
			t.Fatalf("Parse(%q) gave %d processors", s, set.n)
		}
		if back, err := Parse(set.String()); err != nil || back != set {
			t.Fatalf("Parse(%q) = %v does not read back", s, set)
		}
	})
}
