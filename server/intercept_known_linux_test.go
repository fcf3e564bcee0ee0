package server

import (
	"os/exec"
	"testing"

	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
)

// An intercepted call finds its process known without asking its pidfd
// only when it comes from the thread an earlier call found it for: a
// process that has exited, whose pid a new caller now has, is known to
// nobody else.
func TestInterceptedProcKnownByTask(t *testing.T) {
	child := exec.Command("true")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid := child.Process.Pid
	h := process.Open(nil, pid)
	if !h.Pinned() {
		child.Wait()
		t.Skip("no pidfd")
	}
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	svc := keys.New()
	defer svc.Close()
	s := New(svc, Config{})
	cred := keys.Cred{UID: 1000, GID: 1000, PID: pid}
	p := &proc{caller: svc.NewCaller(cred), tracked: true, handle: h, charge: cred.UID}
	p.calls.task = 7
	s.mu.Lock()
	if e := s.usage.admitProc(cred.UID); e != 0 {
		t.Fatal(e)
	}
	s.procs.add(pid, p)
	s.mu.Unlock()

	// Another thread (or none known) than the one it was found for: the
	// pidfd is asked, says the process has gone, and the pid's caller is
	// not given its keyrings.
	for _, task := range []uint64{0, 8} {
		if got, err := s.interceptedProc(cred, task); got == p || err == nil {
			t.Fatalf("task %d: %p, %v; the exited process's entry was taken", task, got, err)
		}
	}
	// The thread it was found for still lives whenever it calls (its
	// task number says so): the entry is its process's.
	if got, err := s.interceptedProc(cred, 7); got != p || err != nil {
		t.Fatalf("task 7: %p, %v; want the entry it was found for", got, err)
	}
	s.mu.Lock()
	s.dropProcLocked(p)
	s.mu.Unlock()
	p.end()
}
