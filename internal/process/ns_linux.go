package process

import (
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// OwnedByOurs reports whether the namespace /proc/<pid>/ns/<kind> is
// owned by the daemon's own user namespace: one that only a process with
// CAP_SYS_ADMIN there could make (clone, unshare), whereas any user can
// make one owned by a user namespace of their own (unshare -Urp).
func OwnedByOurs(pid int, kind string) bool {
	own, err := ownUserNS()
	if err != nil {
		return false
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/"+kind, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	user, err := unix.IoctlRetInt(fd, unix.NS_GET_USERNS)
	if err != nil {
		return false
	}
	defer unix.Close(user)
	var st unix.Stat_t
	return unix.Fstat(user, &st) == nil && nsIDOf(&st) == own
}

// NSOf returns the identity of namespace kind ("pid", "mnt") of process
// pid, as /proc/<pid>/ns/<kind> shows it.
func NSOf(pid int, kind string) (NSID, bool) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/"+kind, &st); err != nil {
		return NSID{}, false
	}
	return nsIDOf(&st), true
}

// PIDNSBelow reports whether the pid namespace of process pid is one
// below ns: its parents, walked up, reach ns before the daemon's own pid
// namespace (where the walk ends, EPERM). The caller makes sure that pid
// is still the process it means once this returns.
func PIDNSBelow(pid int, ns NSID) bool { return slices.Contains(PIDNSParents(pid), ns) }

// PIDNSParents returns the pid namespaces above process pid's, nearest
// first, up to and without the daemon's own (where the walk ends,
// EPERM): what [PIDNSBelow] looks through, read once for a caller that
// asks about many namespaces. The caller makes sure that pid is still
// the process it means once this returns.
func PIDNSParents(pid int) []NSID {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	var parents []NSID
	// Pid namespaces nest at most 32 deep.
	for range 33 {
		parent, err := unix.IoctlRetInt(fd, unix.NS_GET_PARENT)
		unix.Close(fd)
		if err != nil {
			return parents
		}
		fd = parent
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			break
		}
		parents = append(parents, nsIDOf(&st))
	}
	unix.Close(fd)
	return parents
}
