package procfs

import (
	"os"
	"strconv"
	"sync"
	"syscall"
)

// Ours reports whether /proc is the calling process's own: mounted for
// the pid namespace it runs in, so that /proc/<pid> is the process the
// kernel names pid to it (in SO_PEERCRED, seccomp notifications,
// pidfd_open). A /proc of another namespace (unshare --pid without
// --mount-proc, a host's /proc in a container) names other processes by
// those numbers: a peer's capabilities, ancestry or memory read there
// would be an unrelated process's. Decided once, from /proc/self, which
// in a /proc of another namespace is another number or nothing.
var Ours = sync.OnceValue(func() bool {
	self, err := os.Readlink("/proc/self")
	return err == nil && self == strconv.Itoa(os.Getpid())
})

// errForeign is what reading a process's file of a /proc that is not
// Ours returns: as if the process were not there.
var errForeign = syscall.ENOENT

// Open opens a file of /proc read-only and close-on-exec, refusing
// (ENOENT) where /proc is not [Ours].
func Open(path string) (int, error) {
	if !Ours() {
		return -1, errForeign
	}
	return openRetry(path, syscall.O_RDONLY)
}

// OpenMem opens /proc/<pid>/mem for reading and writing, close-on-exec,
// refusing (ENOENT) where /proc is not [Ours]. The descriptor holds the
// memory of the process pid names when it is opened, whatever the pid
// names later: reads and writes through it reach that memory or none.
func OpenMem(pid int) (int, error) {
	if !Ours() {
		return -1, errForeign
	}
	return openRetry("/proc/"+strconv.Itoa(pid)+"/mem", syscall.O_RDWR)
}
