package main

import (
	"crypto/rand"
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
// the state of a daemon stopped for a restart (a sealed memfd of its
// sealed stream, statebox.go), the two ends of the pipe that holds the
// stream's key (fdStateKeyName, fdStateKeyWName: systemd drops a stored
// descriptor that reports a hang-up, which a pipe's read end does once
// no write end is open) and the descriptors its records name
// (fdKeptPrefix + their index).
const (
	fdStateName     = "ukeyd-state"
	fdStateKeyName  = "ukeyd-state-key"
	fdStateKeyWName = "ukeyd-state-key-w"
	fdKeptPrefix    = "ukeyd-fd-"
)

// keptState is what a daemon stopped for a restart left in systemd's
// store for the next: its sealed state, and the pipe its key is in.
type keptState struct {
	state, key, keyW *os.File
}

func (k *keptState) close() {
	for _, f := range []*os.File{k.state, k.key, k.keyW} {
		if f != nil {
			f.Close()
		}
	}
}

// systemdFiles sorts out what systemd passed (socket activation, or the
// file-descriptor store): the listening Unix sockets, and a stopped
// daemon's state with the descriptors it kept (nil if none).
func systemdFiles() (lns []*net.UnixListener, state *keptState, kept []int, err error) {
	byIndex := map[int]int{}
	ks := &keptState{}
	for _, f := range activation.Files(true) {
		name := f.Name()
		switch {
		case name == fdStateName:
			ks.state = f
			continue
		case name == fdStateKeyName:
			ks.key = f
			continue
		case name == fdStateKeyWName:
			ks.keyW = f
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
	if ks.state != nil || ks.key != nil || ks.keyW != nil {
		state = ks
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
// starts next: the keys and records sealed with a fresh key in a memfd
// (statebox.go) sealed against every change, the key in a pipe, the
// connections' and seccomp listeners' descriptors beside them, all in
// systemd's file-descriptor store (FileDescriptorStoreMax must hold
// them). It returns nil once they are stored; srv then serves no more.
//
// Nothing in the store is a payload in swappable memory: the memfd
// (shmem, swapped like anonymous memory) holds only ciphertext, and a
// pipe's buffer is kernel memory, never swapped. The key's only other
// copy is this process's, wiped here.
func freezeToSystemd(srv *server.Server) error {
	if os.Getenv("NOTIFY_SOCKET") == "" {
		return fmt.Errorf("NOTIFY_SOCKET is not set: not under systemd")
	}
	key := make([]byte, stateKeyLen)
	defer clear(key)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	var pfd [2]int
	if err := unix.Pipe2(pfd[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	defer unix.Close(pfd[0])
	defer unix.Close(pfd[1])
	// A pipe holds a page at the least: the key fits, and the write
	// never blocks.
	if n, err := unix.Write(pfd[1], key); err != nil || n != len(key) {
		return fmt.Errorf("the state's key into its pipe: %d bytes, %v", n, err)
	}
	mfd, err := unix.MemfdCreate(fdStateName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(mfd), fdStateName)
	defer f.Close()
	bw, err := newBoxWriter(f, key)
	if err != nil {
		return err
	}
	fds, err := srv.Freeze(bw)
	if cerr := bw.Close(); err == nil && cerr != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		err = cerr
	}
	if err != nil {
		return err
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	// Nothing can change it from here on: the next daemon refuses a
	// state without every seal.
	if _, err := unix.FcntlInt(uintptr(mfd), unix.F_ADD_SEALS, stateSeals); err != nil {
		return err
	}
	for i, fd := range fds {
		if err := storeFDs(fmt.Sprintf("FDSTORE=1\nFDNAME=%s%d", fdKeptPrefix, i), fd); err != nil {
			return fmt.Errorf("storing descriptor %d of %d: %w", i, len(fds), err)
		}
	}
	if err := storeFDs("FDSTORE=1\nFDNAME="+fdStateKeyWName, pfd[1]); err != nil {
		return err
	}
	if err := storeFDs("FDSTORE=1\nFDNAME="+fdStateKeyName, pfd[0]); err != nil {
		return err
	}
	// The state last: a daemon that finds it finds everything it names.
	return storeFDs("FDSTORE=1\nFDNAME="+fdStateName, mfd)
}

// stateSeals are the seals a kept state must have: no write, no change
// of size, no seal removed (there is no removing one) or added.
const stateSeals = unix.F_SEAL_WRITE | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// openKeptState checks that ks is a state freezeToSystemd kept and
// returns the reader of its plaintext (wipe it once read).
func openKeptState(ks *keptState) (*boxReader, error) {
	if ks.state == nil || ks.key == nil {
		return nil, fmt.Errorf("the store holds a state without its key, or a key without its state")
	}
	seals, err := unix.FcntlInt(ks.state.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("the state is not a sealed memfd: %w", err)
	}
	if seals&stateSeals != stateSeals {
		return nil, fmt.Errorf("the state is not sealed against change (seals %#x, want %#x)", seals, stateSeals)
	}
	st, err := ks.state.Stat()
	if err != nil {
		return nil, err
	}
	key := make([]byte, stateKeyLen+1)
	defer clear(key)
	// Whatever is in the pipe is all there is: not a byte more, and
	// never a wait for one.
	if err := unix.SetNonblock(int(ks.key.Fd()), true); err != nil {
		return nil, err
	}
	n, err := unix.Read(int(ks.key.Fd()), key)
	if err != nil || n != stateKeyLen {
		return nil, fmt.Errorf("the state's key: %d bytes in its pipe (%v), want %d", max(n, 0), err, stateKeyLen)
	}
	// From its start, whatever the offset the stopped daemon's writing
	// left on the file description they share.
	return newBoxReader(io.NewSectionReader(ks.state, 0, st.Size()), key[:stateKeyLen])
}

// thawFromSystemd makes the daemon again from a state a stopped daemon
// kept (freezeToSystemd) and has systemd forget it and the descriptors
// kept with it. The state needs no wiping: its key was only in the
// pipe, now read and closed.
//
// A state the daemon before this one kept (previousState: the plaintext
// stream in a memfd sealed only against a change of size, no key) is
// taken back too, once, so that the first restart after an upgrade
// loses nothing, and then wiped (previous says so); anything that
// claims this daemon's format must be sealed and open with its key.
func thawFromSystemd(ks *keptState, kept []int, thaw func(io.Reader, []int) error) (previous bool, err error) {
	defer ks.close()
	if size, ok := previousState(ks); ok {
		err = thaw(io.NewSectionReader(ks.state, 0, size), kept)
		wipeState(ks.state, size)
		previous = true
	} else if br, oerr := openKeptState(ks); oerr == nil {
		err = thaw(br, kept)
		br.Wipe()
	} else {
		err = oerr
		closeAll(kept)
	}
	names := []string{"FDSTOREREMOVE=1\nFDNAME=" + fdStateName,
		"FDSTOREREMOVE=1\nFDNAME=" + fdStateKeyName, "FDSTOREREMOVE=1\nFDNAME=" + fdStateKeyWName}
	for i := range kept {
		names = append(names, fmt.Sprintf("FDSTOREREMOVE=1\nFDNAME=%s%d", fdKeptPrefix, i))
	}
	for _, n := range names {
		storeFDs(n)
	}
	return previous, err
}

// previousKeysMagic begins the plaintext state the daemon before this one
// kept (freezeToSystemd of 050dce3 and before): the keys' state stream
// (keys.stateMagic) in its first chunk, after the chunk's 4-byte length.
const previousKeysMagic = "ukeys state\n"

// previousState says whether ks is a state the daemon before this one
// kept (one without its key, in a memfd sealed against growing and
// shrinking but not against writes, that begins as that daemon's did
// and not as a sealed state), and its size.
func previousState(ks *keptState) (int64, bool) {
	if ks.state == nil || ks.key != nil || ks.keyW != nil {
		return 0, false
	}
	seals, err := unix.FcntlInt(ks.state.Fd(), unix.F_GET_SEALS, 0)
	fixed := unix.F_SEAL_GROW | unix.F_SEAL_SHRINK
	if err != nil || seals&fixed != fixed || seals&unix.F_SEAL_WRITE != 0 {
		return 0, false // not fixed in size, or not to be wiped
	}
	st, err := ks.state.Stat()
	if err != nil {
		return 0, false
	}
	head := make([]byte, 4+len(previousKeysMagic))
	if _, err := ks.state.ReadAt(head, 0); err != nil {
		return 0, false
	}
	return st.Size(), string(head[4:]) == previousKeysMagic
}

// wipeState overwrites the first size bytes of a kept state with zeros:
// it held every payload in the clear.
func wipeState(f *os.File, size int64) {
	zero := make([]byte, 64<<10)
	for off := int64(0); off < size; off += int64(len(zero)) {
		f.WriteAt(zero[:min(int64(len(zero)), size-off)], off)
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
