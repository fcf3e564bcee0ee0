package server

import (
	"os"
	"testing"

	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
)

// The nearest known ancestor is found by pid and start time: a process
// the daemon knew at a pid that has since been given to another (a
// different start time) is not anyone's ancestor, and neither is a
// private caller.
func TestInheritedLocked(t *testing.T) {
	svc := keys.New()
	defer svc.Close()
	s := New(svc, Config{})
	known := &proc{caller: svc.NewCaller(keys.Cred{UID: 1000, PID: 100}), start: "5000"}
	far := &proc{caller: svc.NewCaller(keys.Cred{UID: 1000, PID: 50}), start: "10"}
	s.procs.add(100, known)
	s.procs.add(50, far)
	s.procs.add(70, &proc{caller: svc.NewCaller(keys.Cred{UID: 1000, PID: 70}), start: "20", private: true})
	for _, c := range []struct {
		name      string
		ancestors []procID
		want      *proc
	}{
		{"none", nil, nil},
		{"the parent", []procID{{100, "5000"}, {50, "10"}}, known},
		{"the nearest of two", []procID{{300, "1"}, {100, "5000"}, {50, "10"}}, known},
		{"a reused pid", []procID{{100, "6000"}, {50, "10"}}, far},
		{"a private caller", []procID{{70, "20"}}, nil},
	} {
		if got := s.inheritedLocked(c.ancestors); got != c.want {
			t.Errorf("%s: %p, want %p", c.name, got, c.want)
		}
	}
	for _, p := range []*proc{known, far, s.procs.lookup(70)} {
		p.caller.Release()
	}
}

// This process's ancestry, read as the daemon reads a caller's, is its
// parent first, each with a start time.
func TestAncestry(t *testing.T) {
	if !process.TreeSupported {
		t.Skip("the daemon cannot read a process's ancestry on this system")
	}
	start, anc := ancestry(os.Getpid())
	if start == "" {
		t.Fatal("no start time for this process")
	}
	if os.Getppid() > 1 && (len(anc) == 0 || anc[0].pid != os.Getppid() || anc[0].start == "") {
		t.Fatalf("ancestry %v, want the parent %d first", anc, os.Getppid())
	}
	for _, a := range anc {
		if a.pid <= 1 {
			t.Fatalf("init or below in %v", anc)
		}
	}
}
