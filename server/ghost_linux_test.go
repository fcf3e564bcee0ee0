package server

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
)

// A process the daemon keeps as a ghost (forked by a process in a
// session) takes its start time from the ghost on its first connection,
// without reading its ancestry, when the connection's own pidfd and the
// ghost's both say the process lives; otherwise its ancestry is read as
// any new process's is. The test process plays the one that connects.
func TestGhostStartFromThePeer(t *testing.T) {
	if !process.TreeSupported {
		t.Skip("no process tree here")
	}
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	uc, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()

	svc := keys.New()
	defer svc.Close()
	s := New(svc, Config{})
	pid := os.Getpid()
	start := process.StartTime(pid)
	gh, ok := process.OpenPID(pid, start)
	if !ok {
		t.Fatal("cannot open the test process by its pid")
	}
	ghost := &proc{caller: svc.NewCaller(keys.Cred{PID: pid}), handle: gh, start: start, tracked: true, ghost: true}
	defer ghost.end()
	s.mu.Lock()
	s.procs.add(pid, ghost)
	s.mu.Unlock()

	h := process.Open(uc, pid)
	defer h.Close()
	if !h.IsPeer() {
		t.Skip("no SO_PEERPIDFD on this kernel (Linux 6.5): the ancestry is always read")
	}
	got, ancestors := s.ghostStart(ghost, &h)
	if got != start || ancestors != nil {
		t.Fatalf("a live ghost of the peer: start %q, ancestors %v; want %q and no ancestry read", got, ancestors, start)
	}

	if os.Getppid() <= 1 {
		return // no ancestry to read: the fallbacks cannot be told apart
	}
	// A ghost that is no longer the daemon's: the ancestry is read.
	s.mu.Lock()
	s.procs.remove(pid)
	s.mu.Unlock()
	got, ancestors = s.ghostStart(ghost, &h)
	if got != start || len(ancestors) == 0 {
		t.Fatalf("a ghost the daemon dropped: start %q, ancestors %v; want %q and the ancestry read", got, ancestors, start)
	}

	// A handle opened by pid proves nothing of the peer: the ancestry is
	// read.
	s.mu.Lock()
	s.procs.add(pid, ghost)
	s.mu.Unlock()
	byPid, _ := process.OpenPID(pid, start)
	defer byPid.Close()
	if _, ancestors = s.ghostStart(ghost, &byPid); len(ancestors) == 0 {
		t.Fatal("a handle opened by pid was taken for the peer's own")
	}
}
