package process

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Pidfd returns h's pidfd, -1 if it holds none; it stays h's. A daemon
// handing a process over sends it, so that the next one names the same
// process whatever became of its pid ([Adopt]).
func (h *Handle) Pidfd() int {
	if !h.pinned {
		return -1
	}
	return h.fd
}

// Adopt makes a handle of pidfd fd, received from another process (it
// takes fd): its pid is the kernel's word on the pidfd (its fdinfo), in
// this process's pid namespace. A pidfd of a process that has exited, or
// one this process cannot number, or a descriptor that is no pidfd, is
// refused (fd is then closed).
func Adopt(fd int) (Handle, error) {
	pid, err := pidfdPID(fd)
	if err != nil {
		unix.Close(fd)
		return Handle{}, err
	}
	h := Handle{pid: pid, fd: fd, pinned: true}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err == nil {
		h.file = os.NewFile(uintptr(fd), "pidfd")
	}
	return h, nil
}

// pidfdPID reads the pid a pidfd names from /proc/self/fdinfo.
func pidfdPID(fd int) (int, error) {
	f, err := os.Open("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "Pid:")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(v))
		switch {
		case err != nil:
			return 0, err
		case pid <= 0:
			return 0, fmt.Errorf("the pidfd's process has exited, or is outside this pid namespace (pid %d)", pid)
		}
		return pid, nil
	}
	return 0, errors.New("the descriptor is no pidfd")
}

// MakeNSID returns the NSID of the namespace on nsfs device dev at inode
// ino, as [NSID.Parts] gave them: a hand-over carries them so.
func MakeNSID(dev, ino uint64) NSID { return NSID{dev, ino} }

// Parts returns the nsfs device and inode of n.
func (n NSID) Parts() (dev, ino uint64) { return n.dev, n.ino }
