package forks

import (
	"encoding/binary"
	"testing"
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
	got := Parse(b)
	want := []Event{{ParentTgid: 10, ChildPid: 11}, {Exit: true, PID: 11}, {Exec: true, PID: 10}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("%+v, want %+v", got, want)
	}
	if got := Parse(b[:len(b)-3]); len(got) != 3 {
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
		for _, ev := range Parse(b) {
			if !ev.Exit && (ev.ChildPid <= 1 || ev.ParentTgid <= 0) || ev.Exit && ev.PID <= 1 {
				t.Fatalf("%x: %+v", b, ev)
			}
		}
	})
}
