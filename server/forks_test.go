package server

import (
	"encoding/binary"
	"os"
	"os/exec"
	"testing"

	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
)

// event builds one connector datagram carrying a proc_event of kind what
// with the four words of its data.
func event(what uint32, words ...uint32) []byte {
	b := make([]byte, nlmsgHdrLen+cnMsgLen+procEventHdrLen+16)
	binary.NativeEndian.PutUint32(b, uint32(len(b)))
	c := b[nlmsgHdrLen:]
	binary.NativeEndian.PutUint32(c, cnIdxProc)
	binary.NativeEndian.PutUint32(c[4:], cnValProc)
	binary.NativeEndian.PutUint16(c[16:], procEventHdrLen+16)
	e := c[cnMsgLen:]
	binary.NativeEndian.PutUint32(e, what)
	for i, w := range words {
		binary.NativeEndian.PutUint32(e[procEventHdrLen+4*i:], w)
	}
	return b
}

func TestParseProcEvents(t *testing.T) {
	var b []byte
	b = append(b, event(procEventFork, 10, 10, 11, 11)...) // a process forks a process
	b = append(b, event(procEventFork, 10, 10, 12, 11)...) // a thread: skipped
	b = append(b, event(procEventExit, 11, 11, 0, 0)...)   // a process exits
	b = append(b, event(procEventExit, 12, 11, 0, 0)...)   // a thread exits: skipped
	b = append(b, event(0x00000002, 10, 10, 0, 0)...)      // an exec: skipped
	b = append(b, event(procEventFork, 0, 0, 13, 13)...)   // no parent: skipped
	got := parseProcEvents(b)
	want := []procEvent{{parentTgid: 10, childPid: 11}, {exit: true, pid: 11}, {exec: true, pid: 10}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("%+v, want %+v", got, want)
	}
	if got := parseProcEvents(b[:len(b)-3]); len(got) != 3 {
		t.Fatalf("a truncated last message: %+v", got)
	}
	// The subscription is an NLMSG_DONE carrying PROC_CN_MCAST_LISTEN.
	m := listenMessage()
	if binary.NativeEndian.Uint32(m) != uint32(len(m)) || binary.NativeEndian.Uint32(m[nlmsgHdrLen+cnMsgLen:]) != procCnMcastListen {
		t.Fatalf("listen message %x", m)
	}
}

// Whatever a datagram holds, parsing never panics, and every fork it
// reports is of a process (pid 2 or more) by a process.
func FuzzParseProcEvents(f *testing.F) {
	f.Add(event(procEventFork, 10, 10, 11, 11))
	f.Add(append(event(procEventExit, 5, 5, 0, 0), 1, 2, 3))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, ev := range parseProcEvents(b) {
			if !ev.exit && (ev.childPid <= 1 || ev.parentTgid <= 0) || ev.exit && ev.pid <= 1 {
				t.Fatalf("%x: %+v", b, ev)
			}
		}
	})
}

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
	s.forks = devnull // as if the connector were followed
	parent := &proc{caller: svc.NewCaller(keys.Cred{UID: 1000, GID: 1000, PID: 4000000}), handle: process.Unpinned(4000000), tracked: true, charge: 1000}
	if _, err := parent.caller.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	session := parent.caller.Session()
	s.mu.Lock()
	s.procs[4000000] = parent
	s.admitProc(1000)
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
	s.handle(procEvent{parentTgid: 4000000, childPid: child.Process.Pid})
	s.mu.Lock()
	ghost := s.procs[child.Process.Pid]
	s.mu.Unlock()
	// Charged to the child's own uid (this test's), not its parent's.
	if ghost == nil || !ghost.ghost || ghost.caller.Session() != session || ghost.caller.Cred().UID != uint32(os.Geteuid()) {
		t.Fatal("the child is not kept with its parent's session under its own uid")
	}
	// The parent's exit event ends its tomb.
	s.handle(procEvent{exit: true, pid: 4000000})
	s.mu.Lock()
	_, still := s.tombs[4000000]
	s.mu.Unlock()
	if still {
		t.Fatal("the tomb outlived its exit event")
	}
	// A fork that gives a tomb's pid to another process ends it too.
	s.mu.Lock()
	s.tombs[4000001] = tomb{p: &proc{caller: svc.NewCaller(keys.Cred{UID: 1, PID: 4000001})}}
	s.mu.Unlock()
	s.handle(procEvent{parentTgid: 1, childPid: 4000001})
	s.mu.Lock()
	_, still = s.tombs[4000001]
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
	s.procs[4000002] = live
	s.admitProc(1000)
	s.mu.Unlock()
	s.handle(procEvent{exit: true, pid: 4000002})
	s.handle(procEvent{exec: true, pid: 4000002})
	s.mu.Lock()
	s.dropProcLocked(live) // it exits for real, noticed by its pidfd first
	s.entombLocked(live)
	_, tombed := s.tombs[4000002]
	s.mu.Unlock()
	live.end()
	if !tombed {
		t.Fatal("an exec's exit event kept a process out of its tomb")
	}
	s.forks = nil
	if err := s.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}
