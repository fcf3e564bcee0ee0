package process

import (
	"errors"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// NSID names a namespace as the kernel does: its nsfs device and inode.
type NSID struct{ dev, ino uint64 }

// nsIDOf is the namespace st (of an nsfs file) names.
func nsIDOf(st *unix.Stat_t) NSID { return NSID{uint64(st.Dev), st.Ino} }

// maxUserNSDepth is how deep the kernel nests user namespaces (32), and
// one more.
const maxUserNSDepth = 33

// NSOwner returns the uid that owns the user namespace of process pid,
// walked up to the daemon's own: uid itself (the uid the kernel reported
// for the process) if the process is in the daemon's user namespace or
// in none below it, else the owner (NS_GET_OWNER_UID, as the daemon sees
// it) of the namespace on the way whose parent is the daemon's. A user
// who maps the 65,536 uids /etc/subuid gives them into a namespace
// (newuidmap) made that namespace, and owns it: every one of those uids
// is that user here. ok is false if the namespace could not be read
// (gone is then true if the process no longer exists); the caller must
// then check, by the process's pidfd, that the pid was still the
// caller's once the namespace was read.
func NSOwner(pid int, uid uint32) (owner uint32, ok, gone bool) {
	self, err := ownUserNS()
	if err != nil {
		return uid, false, false
	}
	path := "/proc/" + strconv.Itoa(pid) + "/ns/user"
	// The common case, a caller in the daemon's own namespace, costs
	// one system call.
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return uid, false, errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
	}
	if nsIDOf(&st) == self {
		return uid, true, false
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return uid, false, errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
	}
	defer func() { unix.Close(fd) }()
	for range maxUserNSDepth {
		parent, err := unix.IoctlRetInt(fd, unix.NS_GET_PARENT)
		if err != nil {
			// EPERM: fd's namespace is the first one, or its parent is
			// outside the daemon's; the caller is not below the daemon.
			return uid, true, false
		}
		if err := unix.Fstat(parent, &st); err != nil {
			unix.Close(parent)
			return uid, false, false
		}
		if nsIDOf(&st) == self {
			unix.Close(parent)
			var o uint32
			if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.NS_GET_OWNER_UID, uintptr(unsafe.Pointer(&o))); e != 0 {
				return uid, false, false
			}
			return o, true, false
		}
		unix.Close(fd)
		fd = parent
	}
	return uid, false, false
}
