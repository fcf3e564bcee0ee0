package container

import (
	"errors"
	"syscall"

	"github.com/ukeys/ukeys/internal/process"
)

// Identity is what ties a container's id to its processes: the pid
// namespace of its processes and, where that is the daemon's own (a
// container that shares the host's pids), its mount namespace. Neither
// can be entered by a process outside the container without
// CAP_SYS_ADMIN over it (setns): a root process without capabilities
// cannot, whereas it may move itself into any cgroup (cgroup.procs is
// root's, and it is root), so the cgroup is no proof.
type Identity struct {
	pidNS process.NSID
	mntNS process.NSID // the zero NSID unless pidNS is the daemon's
}

// errNoNamespace refuses a "container" in the daemon's own pid and mount
// namespaces: every process of the host could claim to be in it.
var errNoNamespace = errors.New("the container has neither a pid nor a mount namespace of its own")

// identityOf returns the identity of the container process h is a handle
// of, read while h says the process lives (so that the namespaces read
// are that process's and not those of a later one with its pid), and
// whether the namespace that identifies it is owned by the daemon's own
// user namespace ([process.OwnedByOurs]: only a privileged process could
// make it).
func identityOf(h *process.Handle) (Identity, bool, error) {
	pidNS, ok1 := process.NSOf(h.PID(), "pid")
	mntNS, ok2 := process.NSOf(h.PID(), "mnt")
	pidOurs, mntOurs := process.OwnedByOurs(h.PID(), "pid"), process.OwnedByOurs(h.PID(), "mnt")
	if !ok1 || !ok2 || h.Exited() {
		return Identity{}, false, errors.New("the container's process is gone, or its namespaces cannot be read")
	}
	ownPid, ok1 := process.NSOf(syscall.Getpid(), "pid")
	ownMnt, ok2 := process.NSOf(syscall.Getpid(), "mnt")
	if !ok1 || !ok2 {
		return Identity{}, false, errors.New("the daemon's own namespaces cannot be read")
	}
	if pidNS != ownPid {
		return Identity{pidNS: pidNS}, pidOurs, nil
	}
	if mntNS == ownMnt {
		return Identity{}, false, errNoNamespace
	}
	return Identity{pidNS: pidNS, mntNS: mntNS}, mntOurs, nil
}

// Holds reports whether process pid is one of the container's: in its
// pid namespace or one below it (a process of the container may make a
// pid namespace of its own) or, for a container in the daemon's pid
// namespace, in its mount namespace. The caller makes sure that pid is
// still the process it means once this returns.
func (c Identity) Holds(pid int) bool {
	if c.mntNS != (process.NSID{}) {
		m, ok := process.NSOf(pid, "mnt")
		return ok && m == c.mntNS
	}
	p, ok := process.NSOf(pid, "pid")
	if !ok {
		return false
	}
	// A namespace below the container's too: a process of the container
	// may make a pid namespace of its own.
	return p == c.pidNS || process.PIDNSBelow(pid, c.pidNS)
}

// Of returns the identity of the container a runtime's state
// describes, read from the process it names (pid, the process under
// the filter), and a handle of the container's init (initPid, or
// pid if the state names none), which must be in the same container:
// while the init lives the container does. A process that is gone, or
// whose namespaces are the daemon's own, describes no container. hostMade
// reports a container whose namespace (pid, or mount where it shares the
// daemon's pids) is owned by the daemon's user namespace: only a process
// privileged there could have made it (identityOf).
func Of(pid, initPid int) (init process.Handle, who Identity, hostMade bool, err error) {
	open := func(pid int) (process.Handle, error) {
		start := ""
		if pid > 0 {
			start = process.StartTime(pid)
		}
		if start == "" {
			return process.Handle{}, errors.New("the process the state names is gone, or is none")
		}
		h, ok := process.OpenPID(pid, start)
		if !ok {
			return process.Handle{}, errors.New("the process the state names is gone")
		}
		return h, nil
	}
	h, err := open(pid)
	if err != nil {
		return h, Identity{}, false, err
	}
	who, hostMade, err = identityOf(&h)
	if err != nil || initPid <= 0 || initPid == pid {
		if err != nil {
			h.Close()
		}
		return h, who, hostMade, err
	}
	h.Close()
	init, err = open(initPid)
	if err != nil {
		return init, who, hostMade, err
	}
	if !who.Holds(init.PID()) || init.Exited() {
		init.Close()
		return init, who, hostMade, errors.New("the container's init is not in the container of the process the state names")
	}
	return init, who, hostMade, nil
}
