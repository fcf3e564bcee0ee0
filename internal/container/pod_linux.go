package container

import (
	"errors"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/process"
)

// Pod is what the containers of one pod share and no process outside the
// pod can enter without CAP_SYS_ADMIN over it: their IPC and network
// namespaces. A pod's sandbox id is only a name the runtime's state
// carries; a container is taken into a pod's key namespace only if its
// Pod is the one the pod's key namespace was bound to ([Pod.Same]).
type Pod struct {
	ipc, net nsKey
	// pin holds open the first of the two namespaces that is not the
	// daemon's own, so that while the pod is bound no other namespace
	// can be given its number (the kernel reuses the numbers of freed
	// namespaces at once); nil if both are the daemon's.
	pin *os.File
}

// nsKey names a namespace as its nsfs file's device and inode do.
type nsKey struct{ dev, ino uint64 }

// nsOfFD returns the namespace an nsfs descriptor names.
func nsOfFD(fd int) (nsKey, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nsKey{}, err
	}
	return nsKey{uint64(st.Dev), st.Ino}, nil
}

// PodOf returns the pod of the container process h is a handle of, its
// namespaces read while h says the process lives (so that they are that
// process's, not a later one's with its pid). The caller closes it.
func PodOf(h *process.Handle) (Pod, error) {
	var p Pod
	var files [2]*os.File
	keys := [2]*nsKey{&p.ipc, &p.net}
	for i, kind := range []string{"ipc", "net"} {
		fd, err := unix.Open("/proc/"+strconv.Itoa(h.PID())+"/ns/"+kind, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			files[i] = os.NewFile(uintptr(fd), kind)
			*keys[i], err = nsOfFD(fd)
		}
		if err != nil {
			closeAll(files[:])
			return Pod{}, errors.New("the container's IPC or network namespace cannot be read")
		}
	}
	if h.Exited() {
		closeAll(files[:])
		return Pod{}, errors.New("the container's process is gone")
	}
	for i, kind := range []string{"ipc", "net"} {
		own, ok := ownNS(kind)
		if !ok {
			closeAll(files[:])
			return Pod{}, errors.New("the daemon's own namespaces cannot be read")
		}
		if p.pin == nil && *keys[i] != own {
			p.pin, files[i] = files[i], nil
		}
	}
	closeAll(files[:])
	return p, nil
}

// ownNS returns the daemon's own namespace of kind.
func ownNS(kind string) (nsKey, bool) {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/"+kind, &st) != nil {
		return nsKey{}, false
	}
	return nsKey{uint64(st.Dev), st.Ino}, true
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// Shared reports whether the pod has a namespace of its own to be bound
// to: a pod in the host's IPC and network namespaces (hostIPC and
// hostNetwork) shares nothing that the host's processes do not.
func (p Pod) Shared() bool { return p.pin != nil }

// Same reports whether q is in the same IPC and network namespaces as p.
func (p Pod) Same(q Pod) bool { return p.ipc == q.ipc && p.net == q.net }

// Close lets go of the pod's namespaces.
func (p *Pod) Close() {
	if p.pin != nil {
		p.pin.Close()
		p.pin = nil
	}
}

// HoldsAny reports whether process pid is one of the containers' of
// whos ([Identity.Holds]).
func HoldsAny(whos []Identity, pid int) bool { return IndexHolding(whos, pid) >= 0 }

// IndexHolding returns the index in whos of a container that holds
// process pid ([Identity.Holds]), or -1: pid's namespaces are read once,
// whatever the number of containers asked about.
func IndexHolding(whos []Identity, pid int) int {
	if len(whos) == 0 {
		return -1
	}
	p, pok := process.NSOf(pid, "pid")
	var m process.NSID
	mok, mread := false, false
	for i, w := range whos {
		if w.mntNS != (process.NSID{}) {
			if !mread {
				m, mok = process.NSOf(pid, "mnt")
				mread = true
			}
			if mok && m == w.mntNS {
				return i
			}
		} else if pok && w.pidNS == p {
			return i
		}
	}
	if !pok {
		return -1
	}
	// A pid namespace below a container's own: a process of the
	// container may make one.
	parents := process.PIDNSParents(pid)
	for i, w := range whos {
		if w.mntNS == (process.NSID{}) && slices.Contains(parents, w.pidNS) {
			return i
		}
	}
	return -1
}

// PodRecord is a [Pod] as a hand-over carries it to the next daemon:
// its namespaces, and which of them (Pinned, "ipc" or "net") the
// descriptor sent beside it holds open ("" if none: both the daemon's).
type PodRecord struct {
	IPCDev uint64 `json:"ipc_dev"`
	IPCIno uint64 `json:"ipc_ino"`
	NetDev uint64 `json:"net_dev"`
	NetIno uint64 `json:"net_ino"`
	Pinned string `json:"pinned,omitempty"`
}

// Record returns p's record and the descriptor that pins it (p's still;
// -1 if none).
func (p Pod) Record() (PodRecord, int) {
	r := PodRecord{IPCDev: p.ipc.dev, IPCIno: p.ipc.ino, NetDev: p.net.dev, NetIno: p.net.ino}
	if p.pin == nil {
		return r, -1
	}
	r.Pinned = "ipc"
	if own, ok := ownNS("ipc"); ok && own == p.ipc {
		r.Pinned = "net"
	}
	return r, int(p.pin.Fd())
}

// RebindPod returns the pod a record says, bound to fd (taken), the
// descriptor that pinned it in the daemon that handed it over: fd must
// be a namespace of the pinned kind, the one the record names, and the
// namespace before it in PodOf's order the new daemon's own, as PodOf
// would have found them. What else binds a container to the pod is its
// init's namespaces, which the caller reads again ([PodOf], [Pod.Same]).
func RebindPod(r PodRecord, fd int) (Pod, error) {
	p := Pod{ipc: nsKey{r.IPCDev, r.IPCIno}, net: nsKey{r.NetDev, r.NetIno}}
	if fd < 0 {
		return Pod{}, errors.New("the pod's namespace did not come")
	}
	f := os.NewFile(uintptr(fd), "pod")
	fail := func(why string) (Pod, error) {
		f.Close()
		return Pod{}, errors.New(why)
	}
	var kind int
	var want nsKey
	switch r.Pinned {
	case "ipc":
		kind, want = unix.CLONE_NEWIPC, p.ipc
	case "net":
		kind, want = unix.CLONE_NEWNET, p.net
		if own, ok := ownNS("ipc"); !ok || own != p.ipc {
			return fail("the pod's IPC namespace, not pinned, is not the daemon's")
		}
	default:
		return fail("the pod's record pins no namespace")
	}
	if t, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE); err != nil || t != kind {
		return fail("the pod's descriptor is no namespace of the kind its record names")
	}
	got, err := nsOfFD(fd)
	if err != nil || got != want {
		return fail("the pod's descriptor is not the namespace its record names")
	}
	if own, ok := ownNS(r.Pinned); !ok || own == want {
		return fail("the pod's pinned namespace is the daemon's own")
	}
	p.pin = f
	return p, nil
}
