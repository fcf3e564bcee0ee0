package server

import (
	"errors"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// nsGetParent is NS_GET_PARENT (linux/nsfs.h): a descriptor of the
// parent of a pid namespace, EPERM past the caller's own.
const nsGetParent = 0xb702

// nsID names a namespace as the kernel does: its nsfs device and inode.
type nsID struct{ dev, ino uint64 }

// nsOf returns the identity of namespace kind ("pid", "mnt") of process
// pid, as /proc/<pid>/ns/<kind> shows it.
func nsOf(pid int, kind string) (nsID, bool) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/"+kind, &st); err != nil {
		return nsID{}, false
	}
	return nsID{uint64(st.Dev), st.Ino}, true
}

// containerIdentity is what ties a container's id to its processes: the
// pid namespace of its processes and, where that is the daemon's own (a
// container that shares the host's pids), its mount namespace. Neither
// can be entered by a process outside the container without
// CAP_SYS_ADMIN over it (setns): a root process without capabilities
// cannot, whereas it may move itself into any cgroup (cgroup.procs is
// root's, and it is root), so the cgroup is no proof.
type containerIdentity struct {
	pidNS nsID
	mntNS nsID // the zero nsID unless pidNS is the daemon's
}

// errNoNamespace refuses a "container" in the daemon's own pid and mount
// namespaces: every process of the host could claim to be in it.
var errNoNamespace = errors.New("the container has neither a pid nor a mount namespace of its own")

// identityOf returns the identity of the container process h is a handle
// of, read while h says the process lives (so that the namespaces read
// are that process's and not those of a later one with its pid).
func identityOf(h *procHandle) (containerIdentity, error) {
	pidNS, ok1 := nsOf(h.pid, "pid")
	mntNS, ok2 := nsOf(h.pid, "mnt")
	if !ok1 || !ok2 || h.exited() {
		return containerIdentity{}, errors.New("the container's process is gone, or its namespaces cannot be read")
	}
	ownPid, ok1 := nsOf(syscall.Getpid(), "pid")
	ownMnt, ok2 := nsOf(syscall.Getpid(), "mnt")
	if !ok1 || !ok2 {
		return containerIdentity{}, errors.New("the daemon's own namespaces cannot be read")
	}
	if pidNS != ownPid {
		return containerIdentity{pidNS: pidNS}, nil
	}
	if mntNS == ownMnt {
		return containerIdentity{}, errNoNamespace
	}
	return containerIdentity{pidNS: pidNS, mntNS: mntNS}, nil
}

// holds reports whether process pid is one of the container's: in its
// pid namespace or one below it (a process of the container may make a
// pid namespace of its own) or, for a container in the daemon's pid
// namespace, in its mount namespace. The caller makes sure that pid is
// still the process it means once this returns.
func (c containerIdentity) holds(pid int) bool {
	if c.mntNS != (nsID{}) {
		m, ok := nsOf(pid, "mnt")
		return ok && m == c.mntNS
	}
	p, ok := nsOf(pid, "pid")
	if !ok {
		return false
	}
	if p == c.pidNS {
		return true
	}
	// A namespace below the container's: walk up its parents, which end
	// (EPERM) at the daemon's own pid namespace. Pid namespaces nest at
	// most 32 deep.
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	for range 33 {
		parent, err := unix.IoctlRetInt(fd, nsGetParent)
		unix.Close(fd)
		if err != nil {
			return false
		}
		fd = parent
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			break
		}
		if (nsID{uint64(st.Dev), st.Ino}) == c.pidNS {
			unix.Close(fd)
			return true
		}
	}
	unix.Close(fd)
	return false
}

// containerOf returns the identity of the container a runtime's state
// describes, read from the process it names (st.Pid, the process under
// the filter), and a handle of the container's init (st.State.Pid, or
// st.Pid if the state names none), which must be in the same container:
// while the init lives the container does. A process that is gone, or
// whose namespaces are the daemon's own, describes no container.
func containerOf(st *ContainerProcessState) (procHandle, containerIdentity, error) {
	open := func(pid int) (procHandle, error) {
		start := ""
		if pid > 0 {
			start = startTime(pid)
		}
		if start == "" {
			return procHandle{fd: -1}, errors.New("the process the state names is gone, or is none")
		}
		h, ok := openPid(pid, start)
		if !ok {
			return procHandle{fd: -1}, errors.New("the process the state names is gone")
		}
		return h, nil
	}
	h, err := open(st.Pid)
	if err != nil {
		return h, containerIdentity{}, err
	}
	who, err := identityOf(&h)
	if err != nil || st.State.Pid <= 0 || st.State.Pid == st.Pid {
		if err != nil {
			h.close()
		}
		return h, who, err
	}
	h.close()
	init, err := open(st.State.Pid)
	if err != nil {
		return init, who, err
	}
	if !who.holds(init.pid) || init.exited() {
		init.close()
		return init, who, errors.New("the container's init is not in the container of the process the state names")
	}
	return init, who, nil
}
