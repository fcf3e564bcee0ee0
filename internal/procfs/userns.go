package procfs

import (
	"strconv"
	"sync"
	"syscall"
)

// ownUserNS is the calling process's user namespace, as the device and
// inode of /proc/self/ns/user. A multithreaded process (any Go program)
// cannot leave its user namespace, so it is read once.
var ownUserNS = sync.OnceValues(func() (syscall.Stat_t, error) {
	var st syscall.Stat_t
	if !Ours() {
		return st, errForeign
	}
	err := syscall.Stat("/proc/self/ns/user", &st)
	return st, err
})

// InOwnUserNS reports whether task pid (a process or a thread) is in the
// calling process's user namespace. Capabilities are relative to the
// namespace that holds them: a process that made a user namespace of
// its own (unshare -U, which any user may) has every capability there,
// and its status and capget(2) show them as if they were the host's.
// The kernel's capable() counts them only in the initial namespace; a
// daemon counts them only in its own. False wherever either namespace
// cannot be read, and where /proc is not [Ours]: capabilities then count
// for nothing.
//
// A task cannot move back into an ancestor namespace (setns(2) there
// needs CAP_SYS_ADMIN in it), so a task found in the daemon's namespace
// after its capabilities were read was there when they were read.
func InOwnUserNS(pid int) bool {
	own := ownUserNSLink()
	if own == "" {
		return false
	}
	// The link's text names the namespace by its inode, which no other
	// namespace has while the daemon's lives: read without the lookup
	// of the namespace's inode that a stat of the link makes, a third
	// faster (an intercepted call by a caller with capabilities makes
	// one at every call).
	var b [32]byte
	n, err := syscall.Readlink("/proc/"+strconv.Itoa(pid)+"/ns/user", b[:])
	if err != nil || n >= len(b) {
		return false
	}
	return own == string(b[:n])
}

// ownUserNSLink is the text of the link to the calling process's user
// namespace (/proc/self/ns/user), or "" where it cannot be read.
var ownUserNSLink = sync.OnceValue(func() string {
	own, err := ownUserNS()
	if err != nil {
		return ""
	}
	return "user:[" + strconv.FormatUint(own.Ino, 10) + "]"
})
