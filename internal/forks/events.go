package forks

import "encoding/binary"

// Connector message layout (linux/connector.h, linux/cn_proc.h), in the
// host's byte order, which netlink keeps.
const (
	cnIdxProc         = 1 // CN_IDX_PROC
	cnValProc         = 1 // CN_VAL_PROC
	procCnMcastListen = 1 // PROC_CN_MCAST_LISTEN
	procEventFork     = 0x00000001
	procEventExec     = 0x00000002
	procEventExit     = 0x80000000
	nlmsgHdrLen       = 16
	cnMsgLen          = 20
	procEventHdrLen   = 16
)

// Event is one event the daemon uses: a fork that made a new process
// (a child that is its own thread group), or the exit of a process's
// first thread.
type Event struct {
	Exit bool
	// Exec: PID exec'd. An exec from a thread other than the first kills
	// that first thread, whose exit the connector reports (with the
	// process's pid) just before: the process has not exited.
	Exec bool
	// A fork: the process that forked and the child. An exit: PID.
	ParentTgid, ChildPid int
	PID                  int
}

// Parse returns the forks and exits in one datagram from the
// connector: netlink messages, each a cn_msg carrying a proc_event.
// Threads (a child that is not its own group leader, a thread other than
// the first exiting) and every other event are skipped; anything
// malformed ends the datagram.
func Parse(b []byte) []Event {
	var out []Event
	for len(b) >= nlmsgHdrLen {
		n := int(binary.NativeEndian.Uint32(b))
		if n < nlmsgHdrLen || n > len(b) {
			return out
		}
		msg := b[nlmsgHdrLen:n]
		b = b[min(len(b), (n+3)&^3):] // messages are 4-byte aligned
		if len(msg) < cnMsgLen {
			continue
		}
		if binary.NativeEndian.Uint32(msg) != cnIdxProc || binary.NativeEndian.Uint32(msg[4:]) != cnValProc {
			continue
		}
		dlen := int(binary.NativeEndian.Uint16(msg[16:]))
		ev := msg[cnMsgLen:]
		if dlen > len(ev) {
			continue
		}
		ev = ev[:dlen]
		if len(ev) < procEventHdrLen+16 {
			continue
		}
		f := ev[procEventHdrLen:]
		a := int(int32(binary.NativeEndian.Uint32(f)))
		b4 := int(int32(binary.NativeEndian.Uint32(f[4:])))
		switch binary.NativeEndian.Uint32(ev) {
		case procEventFork:
			childPid := int(int32(binary.NativeEndian.Uint32(f[8:])))
			childTgid := int(int32(binary.NativeEndian.Uint32(f[12:])))
			if childPid != childTgid || childPid <= 1 || b4 <= 0 {
				continue // a thread, or nonsense
			}
			out = append(out, Event{ParentTgid: b4, ChildPid: childPid})
		case procEventExit:
			if a != b4 || a <= 1 {
				continue // a thread other than the first
			}
			out = append(out, Event{Exit: true, PID: a})
		case procEventExec:
			if b4 > 1 {
				out = append(out, Event{Exec: true, PID: b4})
			}
		}
	}
	return out
}

// listenMessage is the message that subscribes a connector socket to
// process events.
func listenMessage() []byte {
	b := make([]byte, nlmsgHdrLen+cnMsgLen+4)
	binary.NativeEndian.PutUint32(b, uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], 3) // NLMSG_DONE
	c := b[nlmsgHdrLen:]
	binary.NativeEndian.PutUint32(c, cnIdxProc)
	binary.NativeEndian.PutUint32(c[4:], cnValProc)
	binary.NativeEndian.PutUint16(c[16:], 4)
	binary.NativeEndian.PutUint32(c[cnMsgLen:], procCnMcastListen)
	return b
}
