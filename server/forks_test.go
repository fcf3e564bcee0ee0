package server

import (
	"os"
	"os/exec"
	"testing"

	"github.com/ukeys/ukeys/internal/forks"
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
)

// A fork read after its parent's exit was noticed still finds the
// parent's session in its tomb; the parent's exit event ends the tomb,
// and so does a fork that reuses its pid.
func TestForkAfterParentExit(t *testing.T) {
	if !process.TreeSupported {
		t.Skip("no process tree here")
	}
	svc := keys.New()
	defer svc.Close()
	s := New(svc, Config{})
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	s.procs.forks.file = devnull // as if the connector were followed
	parent := &proc{caller: svc.NewCaller(keys.Cred{UID: 1000, GID: 1000, PID: 4000000}), handle: process.Unpinned(4000000), tracked: true, charge: 1000}
	if _, err := parent.caller.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	session := parent.caller.Session()
	s.mu.Lock()
	s.procs.add(4000000, parent)
	s.usage.admitProc(1000)
	// It exits: out of the table, into a tomb.
	s.dropProcLocked(parent)
	s.entombLocked(parent)
	s.mu.Unlock()
	parent.end()
	if !parent.entombed.Load() || parent.caller.Session() != session {
		t.Fatal("the exited parent's session was not kept")
	}
	// The child it forked before it exited, read only now.
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	s.handle(forks.Event{ParentTgid: 4000000, ChildPid: child.Process.Pid})
	s.mu.Lock()
	ghost := s.procs.lookup(child.Process.Pid)
	s.mu.Unlock()
	// Charged to the child's own uid (this test's), not its parent's.
	if ghost == nil || !ghost.ghost || ghost.caller.Session() != session || ghost.caller.Cred().UID != uint32(os.Geteuid()) {
		t.Fatal("the child is not kept with its parent's session under its own uid")
	}
	// The parent's exit event ends its tomb.
	s.handle(forks.Event{Exit: true, PID: 4000000})
	s.mu.Lock()
	_, still := s.procs.tombs[4000000]
	s.mu.Unlock()
	if still {
		t.Fatal("the tomb outlived its exit event")
	}
	// A fork that gives a tomb's pid to another process ends it too.
	s.mu.Lock()
	s.procs.tombs[4000001] = tomb{p: &proc{caller: svc.NewCaller(keys.Cred{UID: 1, PID: 4000001})}}
	s.mu.Unlock()
	s.handle(forks.Event{ParentTgid: 1, ChildPid: 4000001})
	s.mu.Lock()
	_, still = s.procs.tombs[4000001]
	s.mu.Unlock()
	if still {
		t.Fatal("a tomb outlived the reuse of its pid")
	}
	// An exec from a second thread reports its first thread's exit
	// before the exec: the process still forks with its session later.
	live := &proc{caller: svc.NewCaller(keys.Cred{UID: 1000, GID: 1000, PID: 4000002}), handle: process.Unpinned(4000002), tracked: true, charge: 1000}
	if _, err := live.caller.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.procs.add(4000002, live)
	s.usage.admitProc(1000)
	s.mu.Unlock()
	s.handle(forks.Event{Exit: true, PID: 4000002})
	s.handle(forks.Event{Exec: true, PID: 4000002})
	s.mu.Lock()
	s.dropProcLocked(live) // it exits for real, noticed by its pidfd first
	s.entombLocked(live)
	_, tombed := s.procs.tombs[4000002]
	s.mu.Unlock()
	live.end()
	if !tombed {
		t.Fatal("an exec's exit event kept a process out of its tomb")
	}
	s.procs.forks.file = nil
	if err := s.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}
