package main

import (
	"fmt"
	"net"
	"os"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// ukeyd under systemd (deploy/systemd): the socket unit passes the
// listening socket (socket activation, LISTEN_FDS), so that clients queue
// in its backlog while the daemon starts or is replaced; the daemon says
// when it serves (Type=notify, READY=1); a daemon that takes over says
// it is the service's main process now (MAINPID, which NotifyAccess=all
// lets a process other than the main one say), before the old one exits;
// and a daemon that made its own socket keeps it in systemd's
// file-descriptor store, so that a restart finds it again.

// systemdListeners returns the listening Unix sockets systemd passed
// (socket activation, or the file-descriptor store), if any.
func systemdListeners() ([]*net.UnixListener, error) {
	var out []*net.UnixListener
	for _, f := range activation.Files(true) {
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			for _, l := range out {
				l.Close()
			}
			return nil, fmt.Errorf("a descriptor from systemd (%s): %w", f.Name(), err)
		}
		u, ok := ln.(*net.UnixListener)
		if !ok {
			ln.Close()
			continue // not ours (a TCP socket, say): left alone
		}
		// The socket's name is the socket unit's to remove.
		u.SetUnlinkOnClose(false)
		out = append(out, u)
	}
	return out, nil
}

// notify tells systemd state, if it asked to be told (NOTIFY_SOCKET).
func notify(state string) {
	daemon.SdNotify(false, state)
}

// storeListener keeps ln in systemd's file-descriptor store, if there is
// one: a restart of the service then gets it back (LISTEN_FDS) instead
// of making a new socket, and no client is refused meanwhile.
// go-systemd sends no descriptors, so the message goes out here, to the
// same socket.
func storeListener(ln *net.UnixListener) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	raw, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	var serr error
	err = raw.Control(func(fd uintptr) {
		serr = unix.Sendmsg(s, []byte("FDSTORE=1\nFDNAME=ukeyd"), unix.UnixRights(int(fd)), &unix.SockaddrUnix{Name: addr}, 0)
	})
	if err != nil {
		return err
	}
	return serr
}
