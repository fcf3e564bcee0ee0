package server

import (
	"os"

	"golang.org/x/sys/unix"
)

// followForks subscribes to the process events connector and hands each
// fork to forked until Shutdown closes the socket. Without CAP_NET_ADMIN
// the subscription fails, and the daemon says so once, at debug level:
// it then learns ancestry when it meets a process.
func (s *Server) followForks() {
	if !inHostNamespaces() {
		s.log.Debug("ukeyd: in a pid or user namespace of its own, whose pids the process events connector does not report; forks are not followed")
		return
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_CONNECTOR)
	if err != nil {
		s.log.Debug("ukeyd: process events connector unavailable; forks are not followed", "err", err)
		return
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		unix.Close(fd)
		s.log.Debug("ukeyd: cannot bind to the process events connector; forks are not followed", "err", err)
		return
	}
	if err := unix.Sendto(fd, listenMessage(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		s.log.Debug("ukeyd: cannot subscribe to process events; forks are not followed", "err", err)
		return
	}
	// A larger receive buffer rides out bursts of forks elsewhere on the
	// host; the daemon reads only what it needs from each event.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	f := os.NewFile(uintptr(fd), "proc-connector")
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		f.Close()
		return
	}
	s.forks = f
	s.watchers.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.watchers.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				if errIsNoBufs(err) {
					// Events were lost: those children learn their
					// ancestry when they connect, as without the
					// connector.
					continue
				}
				return // closed by Shutdown
			}
			for _, ev := range parseProcEvents(buf[:n]) {
				s.handle(ev)
			}
		}
	}()
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

func errIsNoBufs(err error) bool {
	pe, ok := err.(*os.PathError)
	return ok && pe.Err == unix.ENOBUFS
}
