package server

import (
	"errors"
	"net"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// runtimeCapabilities reads the capabilities of the runtime h is a
// handle of, connected with effective uid euid, as capabilities does, but
// counts those of a runtime that has exited and is not yet reaped (a
// zombie: the kernel keeps its credentials, and its pid is its own,
// until its parent waits for it). A runtime may send its container and
// exit before the agent has accepted it (runc does, and under load it
// is often gone first). reaped reports one that was reaped before its
// capabilities could be read: they are then known to be empty.
func runtimeCapabilities(h *procHandle, euid uint32) (caps uint64, known, reaped bool) {
	caps, known = h.capabilitiesUnless(euid, h.reaped)
	return caps, known, caps == 0 && h.reaped()
}

// peerReaped reports whether the kernel, which could have given a
// pidfd of the peer of uc (SO_PEERPIDFD, Linux 6.5), did not because the
// peer has been reaped (before 6.16, which gives a pidfd of a reaped
// peer too): a handle the peer's pid opened since (openProc's fallback)
// may be a later process's with that pid, whose capabilities are not
// the runtime's.
func peerReaped(uc *net.UnixConn) bool {
	raw, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	reaped := false
	_ = raw.Control(func(fd uintptr) {
		pfd, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
		if err == nil {
			unix.Close(pfd)
		}
		reaped = errors.Is(err, unix.ESRCH)
	})
	return reaped
}

// reaped reports whether the process h is a handle of has been reaped
// (its pid may be another's since): signal 0 through a pidfd reaches an
// exited process until then. Without a pidfd its start time tells, which
// /proc shows until then too.
func (h *procHandle) reaped() bool {
	if h.fd >= 0 {
		return errors.Is(unix.PidfdSendSignal(h.fd, 0, nil, 0), unix.ESRCH)
	}
	return h.exited()
}

// ownedByOurs reports whether the namespace /proc/<pid>/ns/<kind> is
// owned by the daemon's own user namespace: one that only a process with
// CAP_SYS_ADMIN there could make (clone, unshare), whereas any user can
// make one owned by a user namespace of their own (unshare -Urp).
func ownedByOurs(pid int, kind string) bool {
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

// nsOf returns the identity of namespace kind ("pid", "mnt") of process
// pid, as /proc/<pid>/ns/<kind> shows it.
func nsOf(pid int, kind string) (nsID, bool) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/"+kind, &st); err != nil {
		return nsID{}, false
	}
	return nsIDOf(&st), true
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
// are that process's and not those of a later one with its pid), and
// whether the namespace that identifies it is owned by the daemon's own
// user namespace (ownedByOurs: only a privileged process could make it).
func identityOf(h *procHandle) (containerIdentity, bool, error) {
	pidNS, ok1 := nsOf(h.pid, "pid")
	mntNS, ok2 := nsOf(h.pid, "mnt")
	pidOurs, mntOurs := ownedByOurs(h.pid, "pid"), ownedByOurs(h.pid, "mnt")
	if !ok1 || !ok2 || h.exited() {
		return containerIdentity{}, false, errors.New("the container's process is gone, or its namespaces cannot be read")
	}
	ownPid, ok1 := nsOf(syscall.Getpid(), "pid")
	ownMnt, ok2 := nsOf(syscall.Getpid(), "mnt")
	if !ok1 || !ok2 {
		return containerIdentity{}, false, errors.New("the daemon's own namespaces cannot be read")
	}
	if pidNS != ownPid {
		return containerIdentity{pidNS: pidNS}, pidOurs, nil
	}
	if mntNS == ownMnt {
		return containerIdentity{}, false, errNoNamespace
	}
	return containerIdentity{pidNS: pidNS, mntNS: mntNS}, mntOurs, nil
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
		parent, err := unix.IoctlRetInt(fd, unix.NS_GET_PARENT)
		unix.Close(fd)
		if err != nil {
			return false
		}
		fd = parent
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			break
		}
		if nsIDOf(&st) == c.pidNS {
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
// whose namespaces are the daemon's own, describes no container. hostMade
// reports a container whose namespace (pid, or mount where it shares the
// daemon's pids) is owned by the daemon's user namespace: only a process
// privileged there could have made it (identityOf).
func containerOf(st *ContainerProcessState) (init procHandle, who containerIdentity, hostMade bool, err error) {
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
		return h, containerIdentity{}, false, err
	}
	who, hostMade, err = identityOf(&h)
	if err != nil || st.State.Pid <= 0 || st.State.Pid == st.Pid {
		if err != nil {
			h.close()
		}
		return h, who, hostMade, err
	}
	h.close()
	init, err = open(st.State.Pid)
	if err != nil {
		return init, who, hostMade, err
	}
	if !who.holds(init.pid) || init.exited() {
		init.close()
		return init, who, hostMade, errors.New("the container's init is not in the container of the process the state names")
	}
	return init, who, hostMade, nil
}
