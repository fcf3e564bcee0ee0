package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/server"
)

// ukeyd under systemd (deploy/systemd): the socket unit passes the
// listening socket (socket activation, LISTEN_FDS), so that clients queue
// in its backlog while the daemon starts or is replaced; the daemon says
// when it serves (Type=notify, READY=1); a daemon that takes over says
// it is the service's main process now (MAINPID, which NotifyAccess=all
// lets a process other than the main one say), before the old one exits;
// a daemon that made its own socket keeps it in systemd's
// file-descriptor store, so that a restart finds it again; and with
// -fdstore-state, a daemon that systemd stops for a restart keeps its
// keys and connections there too (freezeToSystemd), for the next one.

// fdStateName and fdKeptPrefix name, in systemd's file-descriptor store,
// the state of a daemon stopped for a restart (a sealed memfd) and the
// descriptors its records name (fdKeptPrefix + their index).
const (
	fdStateName  = "ukeyd-state"
	fdKeptPrefix = "ukeyd-fd-"
)

// systemdFiles sorts out what systemd passed (socket activation, or the
// file-descriptor store): the listening Unix sockets, and a stopped
// daemon's state with the descriptors it kept (nil if none).
func systemdFiles() (lns []*net.UnixListener, state *os.File, kept []int, err error) {
	byIndex := map[int]int{}
	for _, f := range activation.Files(true) {
		name := f.Name()
		switch {
		case name == fdStateName:
			state = f
			continue
		case strings.HasPrefix(name, fdKeptPrefix):
			i, perr := strconv.Atoi(strings.TrimPrefix(name, fdKeptPrefix))
			if perr != nil || i < 0 || i > 1<<20 {
				f.Close()
				continue
			}
			if fd, derr := unix.Dup(int(f.Fd())); derr == nil {
				unix.CloseOnExec(fd)
				byIndex[i] = fd
			}
			f.Close()
			continue
		}
		ln, lerr := net.FileListener(f)
		f.Close()
		if lerr != nil {
			continue // not a listening socket: not ours
		}
		u, ok := ln.(*net.UnixListener)
		if !ok {
			ln.Close()
			continue
		}
		// The socket's name is the socket unit's to remove.
		u.SetUnlinkOnClose(false)
		lns = append(lns, u)
	}
	if len(byIndex) > 0 {
		kept = make([]int, len(byIndex))
		for i := range kept {
			fd, ok := byIndex[i]
			if !ok {
				fd = -1 // a gap: the record that names it finds nothing
			}
			kept[i] = fd
		}
		for i, fd := range byIndex {
			if i >= len(kept) {
				unix.Close(fd)
			}
		}
	}
	return lns, state, kept, nil
}

// notify tells systemd state, if it asked to be told (NOTIFY_SOCKET).
func notify(state string) {
	daemon.SdNotify(false, state)
}

// storeFDs sends state with fds to systemd's notification socket: the
// file-descriptor store. go-systemd sends no descriptors, so the message
// goes out here, to the same socket.
func storeFDs(state string, fds ...int) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return fmt.Errorf("NOTIFY_SOCKET is not set: not under systemd")
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	return unix.Sendmsg(s, []byte(state), oob, &unix.SockaddrUnix{Name: addr}, 0)
}

// storeListener keeps ln in systemd's file-descriptor store, if there is
// one: a restart of the service then gets it back (LISTEN_FDS) instead
// of making a new socket, and no client is refused meanwhile.
func storeListener(ln *net.UnixListener) error {
	if os.Getenv("NOTIFY_SOCKET") == "" {
		return nil
	}
	raw, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) { serr = storeFDs("FDSTORE=1\nFDNAME=ukeyd", int(fd)) })
	if err != nil {
		return err
	}
	return serr
}

// freezeToSystemd hands everything srv holds to the daemon systemd
// starts next: the keys and records in a sealed memfd, the connections'
// and seccomp listeners' descriptors beside it, all in systemd's
// file-descriptor store (FileDescriptorStoreMax must hold them). It
// returns nil once they are stored; srv then serves no more.
func freezeToSystemd(srv *server.Server) error {
	if os.Getenv("NOTIFY_SOCKET") == "" {
		return fmt.Errorf("NOTIFY_SOCKET is not set: not under systemd")
	}
	mfd, err := unix.MemfdCreate(fdStateName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(mfd), fdStateName)
	defer f.Close()
	fds, err := srv.Freeze(f)
	if err != nil {
		return err
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	// Its size is fixed from here on: the next daemon reads it knowing
	// nobody can change its length underneath.
	if _, err := unix.FcntlInt(uintptr(mfd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return err
	}
	for i, fd := range fds {
		if err := storeFDs(fmt.Sprintf("FDSTORE=1\nFDNAME=%s%d", fdKeptPrefix, i), fd); err != nil {
			return fmt.Errorf("storing descriptor %d of %d: %w", i, len(fds), err)
		}
	}
	// The state last: a daemon that finds it finds everything it names.
	return storeFDs("FDSTORE=1\nFDNAME="+fdStateName, mfd)
}

// thawFromSystemd makes the daemon again from a state a stopped daemon
// kept (freezeToSystemd), wipes the state and has systemd forget it and
// the descriptors kept with it.
func thawFromSystemd(state *os.File, kept []int, thaw func(io.Reader, []int) error) error {
	defer state.Close()
	var err error
	if st, serr := state.Stat(); serr != nil {
		err = serr
	} else {
		// From its start, whatever the offset the stopped daemon's
		// writing left on the file description they share.
		err = thaw(io.NewSectionReader(state, 0, st.Size()), kept)
	}
	// Wipe: it held every payload.
	if st, serr := state.Stat(); serr == nil {
		zero := make([]byte, 64<<10)
		for off := int64(0); off < st.Size(); off += int64(len(zero)) {
			n := min(int64(len(zero)), st.Size()-off)
			state.WriteAt(zero[:n], off)
		}
	}
	names := []string{"FDSTOREREMOVE=1\nFDNAME=" + fdStateName}
	for i := range kept {
		names = append(names, fmt.Sprintf("FDSTOREREMOVE=1\nFDNAME=%s%d", fdKeptPrefix, i))
	}
	for _, n := range names {
		storeFDs(n)
	}
	return err
}
