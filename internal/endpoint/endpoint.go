package endpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// SocketEnv overrides where the daemon listens and clients connect.
const SocketEnv = "UKEYS_SOCKET"

// SystemSocketEnv moves the system daemon's socket (for a packager, or a
// test that must not touch the host's): where a daemon run by root
// listens by default, and where clients look for it.
const SystemSocketEnv = "UKEYS_SYSTEM_SOCKET"

// HelperEnv is the environment variable through which a request-key
// helper started by the daemon receives the token that lets it act with
// the authority to construct the key (and with nothing else).
const HelperEnv = "UKEYS_HELPER_TOKEN"

// System returns the system daemon's socket: the one a daemon run by
// root listens on, serving every user of the host as the kernel's
// keyrings do. It is /run/ukeys/ukeyd.sock (on macOS and the BSDs
// /var/run/ukeys/ukeyd.sock), or $UKEYS_SYSTEM_SOCKET.
func System() string {
	if p := os.Getenv(SystemSocketEnv); p != "" {
		return p
	}
	return rootSocket
}

// User returns the socket of a user's own daemon, which holds that
// user's keys only: $XDG_RUNTIME_DIR/ukeys/ukeyd.sock, falling back to a
// per-user directory under the temporary directory (userDir).
func User() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "ukeys", "ukeyd.sock")
	}
	return filepath.Join(userDir(os.TempDir(), os.Geteuid()), "ukeyd.sock")
}

// userDir returns the user's directory under tmp, where there is no
// XDG_RUNTIME_DIR: tmp/ukeys-UID, unless another user has taken that
// name (cron, su, or ssh without pam_systemd leave it to whoever makes
// it first, and a daemon must never serve from a directory another user
// controls). Then it is a private directory of the user's own beside it,
// tmp/ukeys-UID.XXXXXXXX, made with a name nobody can guess (as mkdtemp
// does) if there is none yet. The user's processes find it again by
// looking: no other user can make a directory that belongs to UID, so
// every real directory of that pattern that belongs to UID and that no
// one else may enter is one that UID made, and they all take the first
// by name. Once the taken name is free again, the private directory
// stays in use while it is there, so that a running daemon is not
// lost.
func userDir(tmp string, euid int) string {
	base := filepath.Join(tmp, "ukeys-"+strconv.Itoa(euid))
	st, err := os.Lstat(base)
	switch {
	case err == nil && usableDir(st, euid):
		return base
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return base // cannot tell: where it was, to be refused there
	}
	if d, ok := privateDir(tmp, euid); ok {
		return d
	}
	if err != nil {
		return base // free: made by whoever starts the daemon there
	}
	d, err := os.MkdirTemp(tmp, "ukeys-"+strconv.Itoa(euid)+".")
	if err != nil {
		return base // refused there, as before
	}
	// Another process of the user may have made one at the same moment:
	// every one of them takes the first by name.
	if first, ok := privateDir(tmp, euid); ok && first != d {
		os.Remove(d)
		return first
	}
	return d
}

// usableDir reports whether st (from lstat) is a directory a daemon of
// euid may serve from and its clients trust: a real directory of euid's
// or root's that no one else may write unless it is sticky (what client
// and server ask of the socket's directory).
func usableDir(st fs.FileInfo, euid int) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || !st.IsDir() {
		return false
	}
	if int64(sys.Uid) != int64(euid) && sys.Uid != 0 {
		return false
	}
	return st.Mode().Perm()&0o022 == 0 || st.Mode()&fs.ModeSticky != 0
}

// privateDir returns the first by name of euid's private directories
// under tmp: real directories named ukeys-UID.* that belong to euid and
// that no one else may enter.
func privateDir(tmp string, euid int) (string, bool) {
	prefix := "ukeys-" + strconv.Itoa(euid) + "."
	ents, err := os.ReadDir(tmp) // sorted by name
	if err != nil {
		return "", false
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix) || !e.IsDir() {
			continue
		}
		d := filepath.Join(tmp, e.Name())
		st, err := os.Lstat(d)
		if err != nil || !st.IsDir() || st.Mode().Perm()&0o077 != 0 {
			continue
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && int64(sys.Uid) == int64(euid) {
			return d, true
		}
	}
	return "", false
}

// Listen returns where a daemon listens by default: $UKEYS_SOCKET if
// set; the system socket for root; else the user's own.
func Listen() string {
	if p := os.Getenv(SocketEnv); p != "" {
		return p
	}
	if os.Geteuid() == 0 {
		return System()
	}
	return User()
}

// Socket returns where a client finds its daemon: $UKEYS_SOCKET if set;
// else the system daemon's socket, for root always and for anyone else
// when one is there; only otherwise the user's own daemon's. One daemon
// then serves every user of the host, so that keys shared between users
// (chown, group and other permissions, persistent keyrings) live in one
// store.
func Socket() string { return socketFor(os.Geteuid()) }

func socketFor(euid int) string {
	if p := os.Getenv(SocketEnv); p != "" {
		return p
	}
	sys := System()
	if euid == 0 {
		return sys
	}
	if st, err := os.Stat(sys); err == nil && st.Mode()&os.ModeSocket != 0 {
		return sys
	}
	return User()
}

// Scope says whom a daemon running with effective uid euid serves, for
// its log and its status: every user when root, else only its own user
// (its socket's directory admits nobody else).
func Scope(euid int) string {
	if euid == 0 {
		return "every user"
	}
	return "uid " + strconv.Itoa(euid) + " only"
}
