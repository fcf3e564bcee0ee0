package forks

import (
	"encoding/binary"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Subscribe subscribes to the process events connector and returns
// the socket, or nil where the daemon cannot follow forks: outside the
// host's namespaces, without CAP_NET_ADMIN, or without the connector.
// debug, if not nil, is told why, or that events come unfiltered.
func Subscribe(debug func(msg string, args ...any)) *os.File {
	if debug == nil {
		debug = func(string, ...any) {}
	}
	if !inHostNamespaces() {
		debug("ukeyd: in a pid or user namespace of its own, whose pids the process events connector does not report; forks are not followed")
		return nil
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_CONNECTOR)
	if err != nil {
		debug("ukeyd: process events connector unavailable; forks are not followed", "err", err)
		return nil
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		unix.Close(fd)
		debug("ukeyd: cannot bind to the process events connector; forks are not followed", "err", err)
		return nil
	}
	// The kernel reports every thread's birth and death on the host, and
	// every change of ids, session or name: the daemon needs only
	// processes' forks and exits and execs, a few of the events a busy
	// host sends. A filter drops the rest before they wake the daemon.
	if err := attachProcFilter(fd); err != nil {
		debug("ukeyd: cannot filter process events; every one is read", "err", err)
	}
	if err := unix.Sendto(fd, listenMessage(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		debug("ukeyd: cannot subscribe to process events; forks are not followed", "err", err)
		return nil
	}
	// A larger receive buffer rides out bursts of forks elsewhere on the
	// host; the daemon reads only what it needs from each event.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	return os.NewFile(uintptr(fd), "proc-connector")
}

// Drain reads, without waiting, every datagram queued on the connector
// socket rc into buf, and hands apply each event the kernel sent. The
// caller holds the lock that [Read] takes, so that once Drain returns
// every event queued before has been applied.
func Drain(rc syscall.RawConn, buf []byte, apply func(Event)) {
	for {
		var n int
		var from unix.Sockaddr
		var rerr error = unix.EAGAIN
		// Control, not Read: Read holds the descriptor's read lock,
		// which a reader holds while it waits for the caller's lock.
		if rc.Control(func(fd uintptr) {
			n, from, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
		}) != nil || rerr == unix.EAGAIN || rerr == unix.EINTR {
			return
		}
		if rerr != nil {
			if rerr == unix.ENOBUFS {
				continue
			}
			return
		}
		if nl, ok := from.(*unix.SockaddrNetlink); ok && nl.Pid == 0 {
			for _, ev := range Parse(buf[:n]) {
				apply(ev)
			}
		}
	}
}

// Read reads one datagram from the connector socket rc and
// reports whether the kernel sent it. A process with CAP_NET_ADMIN over
// the host's network (root, or a container given that capability and
// the host's network) may send a datagram to the daemon's port: a forged
// fork would give a process of its choosing the keyrings of another, a
// forged exit would drop them. The kernel's own are from port 0.
// On success, mu is locked (before the read), for the caller to unlock
// once it has applied the datagram's events; it is never held while the
// read waits.
func Read(rc syscall.RawConn, buf []byte, mu *sync.Mutex) (n int, fromKernel bool, err error) {
	var from unix.Sockaddr
	var rerr error
	locked := false
	if err := rc.Read(func(fd uintptr) bool {
		mu.Lock()
		n, from, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
		if rerr == unix.EAGAIN {
			mu.Unlock()
			return false
		}
		locked = true
		return true
	}); err != nil {
		if locked {
			mu.Unlock()
		}
		return 0, false, err
	}
	if rerr != nil {
		mu.Unlock()
		return 0, false, &os.PathError{Op: "recvfrom", Path: "proc-connector", Err: rerr}
	}
	nl, ok := from.(*unix.SockaddrNetlink)
	return n, ok && nl.Pid == 0, nil
}

// The inode numbers the kernel gives its initial pid and user namespaces
// (include/linux/proc_ns.h: PROC_PID_INIT_INO, PROC_USER_INIT_INO), fixed
// since namespaces have had inodes.
const (
	initPidNsIno  = 0xEFFFFFFC
	initUserNsIno = 0xEFFFFFFD
)

// inHostNamespaces reports whether the daemon runs in the kernel's
// initial pid and user namespaces. Only there does the connector serve
// it: the kernel reports events with the initial namespace's pids and
// ignores a subscription from any other. A daemon in a container would
// still receive the events some host process subscribed to, with pids
// that in its own namespace name other processes: it would give a
// process of its own the session of an unrelated one, and keep exited
// processes' keyrings waiting for exits it never recognises.
func inHostNamespaces() bool {
	var pid, user unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &pid) != nil || unix.Stat("/proc/self/ns/user", &user) != nil {
		return false
	}
	return pid.Ino == initPidNsIno && user.Ino == initUserNsIno
}

// attachProcFilter attaches to the connector socket fd a classic BPF
// program that lets through only what [Parse] keeps: a fork that
// made a process (child pid equal to its thread group id), an exec, and
// the exit of a process's first thread (pid equal to thread group id).
// The program reads the datagram as the kernel delivers it: the netlink
// header, the cn_msg, then the proc_event (events.go's layout).
func attachProcFilter(fd int) error {
	prog := procFilter()
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
}

// procFilter is attachProcFilter's program.
func procFilter() []unix.SockFilter {
	const (
		ldW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jeqX = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_X
		tax  = unix.BPF_MISC | unix.BPF_TAX
		ret  = unix.BPF_RET | unix.BPF_K
		what = nlmsgHdrLen + cnMsgLen // proc_event.what
		data = what + procEventHdrLen // event_data
		keep = 0xffffffff             // bytes of a datagram kept: all
	)
	// A load is big-endian; the event's fields are in the host's order.
	// Constants are compared as a load reads them; two fields compared
	// with each other need no conversion.
	asLoaded := func(v uint32) uint32 {
		var b [4]byte
		binary.NativeEndian.PutUint32(b[:], v)
		return binary.BigEndian.Uint32(b[:])
	}
	const drop, accept = 12, 13 // the two returns, at the end
	return []unix.SockFilter{
		/* 0 */ {Code: ldW, K: what},
		/* 1 */ {Code: jeq, K: asLoaded(procEventFork), Jt: 4 - 1 - 1},
		/* 2 */ {Code: jeq, K: asLoaded(procEventExit), Jt: 8 - 2 - 1},
		/* 3 */ {Code: jeq, K: asLoaded(procEventExec), Jt: accept - 3 - 1, Jf: drop - 3 - 1},
		// A fork: child_pid (at 8) equal to child_tgid (at 12).
		/* 4 */ {Code: ldW, K: data + 8},
		/* 5 */ {Code: tax},
		/* 6 */ {Code: ldW, K: data + 12},
		/* 7 */ {Code: jeqX, Jt: accept - 7 - 1, Jf: drop - 7 - 1},
		// An exit: process_pid (at 0) equal to process_tgid (at 4).
		/* 8 */ {Code: ldW, K: data},
		/* 9 */ {Code: tax},
		/* 10 */ {Code: ldW, K: data + 4},
		/* 11 */ {Code: jeqX, Jt: accept - 11 - 1, Jf: drop - 11 - 1},
		/* 12 */ {Code: ret, K: 0},
		/* 13 */ {Code: ret, K: keep},
	}
}

// Lost reports whether err, from [Read], says that the kernel dropped
// events for want of room in the socket's buffer: the reader goes on.
func Lost(err error) bool {
	pe, ok := err.(*os.PathError)
	return ok && pe.Err == unix.ENOBUFS
}
