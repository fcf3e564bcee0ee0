package forks

import (
	"bytes"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The connector socket's filter, run by the kernel on a socket of a
// datagram pair: of a host's process events it lets through exactly
// those Parse keeps (forks that make a process, exits of a
// process's first thread, execs), and drops threads' births and deaths,
// the other kinds of events and datagrams too short to hold an event.
func TestProcFilter(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if err := attachProcFilter(fds[1]); err != nil {
		t.Fatalf("attaching the filter: %v", err)
	}
	const uidChange = 0x00000004 // PROC_EVENT_UID
	for _, c := range []struct {
		what string
		b    []byte
		kept bool
	}{
		{"a process forks a process", event(procEventFork, 10, 10, 11, 11), true},
		{"a thread of it forks a process", event(procEventFork, 12, 10, 13, 13), true},
		{"a process makes a thread", event(procEventFork, 10, 10, 14, 10), false},
		{"a process exits", event(procEventExit, 11, 11, 0, 0), true},
		{"a thread exits", event(procEventExit, 14, 10, 0, 0), false},
		{"a process execs", event(procEventExec, 10, 10, 0, 0), true},
		{"a process changes uid", event(uidChange, 10, 10, 0, 0), false},
		{"the subscription's acknowledgement", event(0, 0, 0, 0, 0), false},
		{"a fork cut short", event(procEventFork, 10, 10, 11, 11)[:nlmsgHdrLen+cnMsgLen+procEventHdrLen+10], false},
	} {
		if _, err := unix.Write(fds[0], c.b); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		buf := make([]byte, 256)
		n, _, err := unix.Recvfrom(fds[1], buf, unix.MSG_DONTWAIT)
		switch {
		case c.kept && err != nil:
			t.Errorf("%s: dropped (%v)", c.what, err)
		case c.kept && !bytes.Equal(buf[:n], c.b):
			t.Errorf("%s: %x arrived as %x", c.what, c.b, buf[:n])
		case !c.kept && err == nil:
			t.Errorf("%s: let through", c.what)
		}
		if kept := len(Parse(c.b)) > 0; kept != c.kept {
			t.Errorf("%s: the filter keeps it %v, Parse %v", c.what, c.kept, kept)
		}
	}
}

// TestForgedProcEventsIgnored: a process allowed to send to the daemon's
// connector port (CAP_NET_ADMIN over the host's network) sends it a
// fork; the daemon reads it as not the kernel's, and reads the kernel's
// own events, a real fork's among them, as the kernel's.
func TestForgedProcEventsIgnored(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the process events connector and a netlink send to another port")
	}
	f := Subscribe(nil)
	if f == nil {
		t.Skip("the process events connector is unavailable here (a pid or user namespace of its own, or no CONFIG_PROC_EVENTS)")
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var port uint32
	rc.Control(func(fd uintptr) {
		if sa, err := unix.Getsockname(int(fd)); err == nil {
			port = sa.(*unix.SockaddrNetlink).Pid
		}
	})
	forger, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(forger)
	const parent, child = 0x7ffffff0, 0x7ffffff1 // pids no process has
	forged := event(procEventFork, parent, parent, child, child)
	if err := unix.Sendto(forger, forged, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: port}); err != nil {
		t.Fatalf("sending to the connector's port %d: %v", port, err)
	}
	if err := exec.Command("true").Run(); err != nil {
		t.Fatal(err)
	}
	f.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64<<10)
	sawForged, sawKernel := false, false
	var mu sync.Mutex
	for !sawForged || !sawKernel {
		n, fromKernel, err := Read(rc, buf, &mu)
		if err == nil {
			mu.Unlock()
		}
		if err != nil {
			t.Fatalf("reading (forged seen %v, kernel's seen %v): %v", sawForged, sawKernel, err)
		}
		if bytes.Equal(buf[:n], forged) {
			sawForged = true
			if fromKernel {
				t.Error("the forged fork was read as the kernel's")
			}
			continue
		}
		if fromKernel && len(Parse(buf[:n])) > 0 {
			sawKernel = true
		}
	}
}
