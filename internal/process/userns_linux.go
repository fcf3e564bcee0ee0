package process

import (
	"errors"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/procfs"
)

// pidfdGetUserNamespace is the pidfd ioctl (Linux 6.11) that opens the
// user namespace of the process a pidfd names: _IO(PIDFS_IOCTL_MAGIC, 9).
const pidfdGetUserNamespace = 0xFF<<8 | 9

// errNSHidden: the kernel would show neither the peer's user namespace
// nor its id maps.
var errNSHidden = errors.New("its user namespace cannot be read")

// errNSUnknown: neither a pidfd nor the daemon's own /proc names the peer.
var errNSUnknown = errors.New("its user namespace cannot be told (no pidfd, and /proc is another pid namespace's)")

// ownUserNS is the daemon's user namespace (device and inode), read once:
// a multithreaded process cannot change its user namespace.
var ownUserNS = sync.OnceValues(func() (NSID, error) {
	if pfd, err := unix.PidfdOpen(os.Getpid(), 0); err == nil {
		defer unix.Close(pfd)
		if st, err := userNSOfPidfd(pfd); err == nil {
			return nsIDOf(&st), nil
		}
	}
	if !procfs.Ours() {
		return NSID{}, errNSUnknown
	}
	var st unix.Stat_t
	err := unix.Stat("/proc/self/ns/user", &st)
	return nsIDOf(&st), err
})

// userNSOfPidfd returns the user namespace of the process pfd names.
func userNSOfPidfd(pfd int) (unix.Stat_t, error) {
	var st unix.Stat_t
	nsfd, err := unix.IoctlRetInt(pfd, pidfdGetUserNamespace)
	if err != nil {
		return st, err
	}
	defer unix.Close(nsfd)
	err = unix.Fstat(nsfd, &st)
	return st, err
}

// InOwnUserNS reports whether the process h names (a client's, pinned by
// its pidfd) is in the daemon's own user namespace, or why it cannot be
// told. A process in a namespace that `unshare -U` made may have the
// daemon's uid to SO_PEERCRED, and yet the kernel lets it ptrace no
// process of the daemon's namespace that is not dumpable, nor read a key
// it does not possess. The pidfd's own ioctl answers for the process
// itself; where the kernel has none (before 6.11), /proc/<pid>/ns/user,
// read while the pidfd shows the process alive, answers for it too.
func (h *Handle) InOwnUserNS() (bool, error) {
	own, err := ownUserNS()
	if err != nil {
		return false, err
	}
	var st unix.Stat_t
	switch {
	case h.pinned:
		st, err = userNSOfPidfd(h.fd)
		if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			err = h.procUserNS(&st)
		}
	case h.pid > 0 && h.start != "":
		err = h.procUserNS(&st)
	default:
		err = errNSUnknown
	}
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return h.sameIDMaps()
	}
	if err != nil {
		return false, err
	}
	return nsIDOf(&st) == own, nil
}

// sameIDMaps answers inOwnUserNS where the kernel hides the peer's
// namespace: it shows it only to a process that may ptrace the peer, and
// a daemon without CAP_SYS_PTRACE may not ptrace a peer that is not
// dumpable (ukeyd -takeover is not, and must not become so even for a
// moment: a tracer that attaches while it is stays attached). A process's
// uid and gid maps are readable by everyone, and read from the daemon's
// namespace they equal the daemon's own only in the daemon's namespace
// or in one whose maker could map every id the daemon's maps hold, which
// needs CAP_SETUID and CAP_SETGID over the daemon's namespace (a user's
// own `unshare -U` maps one id, its own). Read while the pidfd (or start
// time) shows the process alive, they are the peer's.
func (h *Handle) sameIDMaps() (bool, error) {
	if !procfs.Ours() || h.pid <= 0 {
		return false, errNSUnknown
	}
	dir := "/proc/" + strconv.Itoa(h.pid) + "/"
	for _, f := range []string{"uid_map", "gid_map"} {
		own, err := os.ReadFile("/proc/self/" + f)
		if err != nil {
			return false, errNSHidden
		}
		peer, err := os.ReadFile(dir + f)
		if err != nil {
			return false, errNSHidden
		}
		if string(own) != string(peer) {
			return false, nil
		}
	}
	if h.Exited() {
		return false, unix.ESRCH
	}
	return true, nil
}

// procUserNS reads h's user namespace from /proc, and makes sure that the
// process read was h's: still there (pidfd, or start time) after.
func (h *Handle) procUserNS(st *unix.Stat_t) error {
	if !procfs.Ours() {
		return errNSUnknown
	}
	if err := unix.Stat("/proc/"+strconv.Itoa(h.pid)+"/ns/user", st); err != nil {
		return err
	}
	if h.Exited() {
		return unix.ESRCH
	}
	return nil
}
