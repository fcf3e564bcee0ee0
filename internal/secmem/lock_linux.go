package secmem

import (
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// lockedAll is set once LockAll has succeeded.
var lockedAll atomic.Bool

// CanLockAll says whether this process may lock all its memory without
// bound, and if not, why.
func CanLockAll() (bool, string) {
	if hasIPCLock() {
		return true, "CAP_IPC_LOCK"
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		return false, fmt.Sprintf("RLIMIT_MEMLOCK unreadable: %v", err)
	}
	if rl.Cur == unix.RLIM_INFINITY {
		return true, "RLIMIT_MEMLOCK unlimited"
	}
	return false, fmt.Sprintf("RLIMIT_MEMLOCK is %d bytes and no CAP_IPC_LOCK", rl.Cur)
}

// hasIPCLock says whether CAP_IPC_LOCK is in the effective set.
func hasIPCLock() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_IPC_LOCK/32].Effective&(1<<(unix.CAP_IPC_LOCK%32)) != 0
}

// LockAll locks every page of the process, those it has and those it
// will map, as each is first touched. It refuses where [CanLockAll] does.
func LockAll() error {
	if ok, why := CanLockAll(); !ok {
		return errors.New(why)
	}
	err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE | unix.MCL_ONFAULT)
	if errors.Is(err, unix.EINVAL) {
		// Kernels before 4.4 know no MCL_ONFAULT: every page now.
		err = unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE)
	}
	if err != nil {
		return fmt.Errorf("mlockall: %w", err)
	}
	lockedAll.Store(true)
	return nil
}

// LockedAll says whether [LockAll] has locked the process.
func LockedAll() bool { return lockedAll.Load() }
