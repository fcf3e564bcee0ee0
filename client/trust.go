package client

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrUntrusted reports a socket the client will not talk to: someone other
// than the caller or root could have put it where it is, or the process
// answering on it runs as someone else. Whatever listens there would
// receive every payload and session token sent to it and could answer
// reads with values of its choosing, so the client refuses before it
// writes a byte. Errors that wrap it are *[UntrustedError] values naming the
// path and the reason.
var ErrUntrusted = errors.New("ukeys: untrusted socket")

// UntrustedError is the refusal of a socket; it wraps [ErrUntrusted].
type UntrustedError struct {
	Path   string // the socket
	Reason string // why, in words for the user
}

func (e *UntrustedError) Error() string {
	return "ukeys: refusing to use " + e.Path + ": " + e.Reason
}

// Unwrap makes errors.Is(err, ErrUntrusted) hold.
func (e *UntrustedError) Unwrap() error { return ErrUntrusted }

func untrusted(path, format string, args ...any) error {
	return &UntrustedError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// trustedUID reports whether uid may serve, or own the way to, a daemon
// for a caller whose effective uid is euid.
func trustedUID(uid uint32, euid int) bool {
	return uid == 0 || int64(uid) == int64(euid)
}

// checkSocketPath decides, before anything is sent, whether the socket at
// path could only have been put there by euid or root.
//
// The socket's own directory is examined with lstat: it must be a real
// directory (not a symbolic link, whose target anyone who could write the
// link's directory chose), owned by euid or root, and writable by no one
// else. One exception: a directory writable by others but sticky (as /tmp
// is) lets others create entries but not remove or rename anyone else's,
// so there the socket itself must be a socket (not a link) owned by euid
// or root; that costs a second lstat, and only in that case.
//
// Directories above it are not walked. Whoever controls one of them can
// at most point the path at another directory, which must pass the same
// test, or swap things between this test and connect; the peer's
// credentials, taken from the connected socket itself (checkPeer), are
// what no such swap can fake.
//
// A missing directory or socket is reported as the errno wrapped in an
// *os.PathError, as connect would report it, so that ENOENT still means
// that no daemon runs there.
func checkSocketPath(path string, euid int) error {
	if len(path) > 0 && path[0] == '@' {
		// An abstract socket has no directory, and anyone may bind any
		// name: the peer's credentials alone decide.
		return nil
	}
	dir := filepath.Dir(path)
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return &os.PathError{Op: "dial", Path: path, Err: err}
	}
	switch {
	case st.Mode&syscall.S_IFMT == syscall.S_IFLNK:
		return untrusted(path, "its directory %s is a symbolic link", dir)
	case st.Mode&syscall.S_IFMT != syscall.S_IFDIR:
		return untrusted(path, "%s is not a directory", dir)
	case !trustedUID(st.Uid, euid):
		return untrusted(path, "its directory %s belongs to uid %d, not to you (uid %d) or root", dir, st.Uid, euid)
	case st.Mode&0o022 == 0:
		return nil
	case st.Mode&syscall.S_ISVTX == 0:
		return untrusted(path, "its directory %s is writable by other users (mode %#o)", dir, st.Mode&0o7777)
	}
	if err := syscall.Lstat(path, &st); err != nil {
		return &os.PathError{Op: "dial", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return untrusted(path, "it is not a socket, in the shared directory %s", dir)
	}
	if !trustedUID(st.Uid, euid) {
		return untrusted(path, "it belongs to uid %d, not to you (uid %d) or root, in the shared directory %s", st.Uid, euid, dir)
	}
	return nil
}

// checkPeer refuses a connected socket whose listener does not run as
// euid or root.
func checkPeer(fd int, path string, euid int) error {
	uid, err := peerUID(fd)
	if err != nil {
		return untrusted(path, "cannot learn who answers there: %v", err)
	}
	if !trustedUID(uid, euid) {
		return untrusted(path, "the daemon answering there runs as uid %d, not as you (uid %d) or root", uid, euid)
	}
	return nil
}
