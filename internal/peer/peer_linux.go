package peer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/procfs"
)

// OfFD reads the credentials of the peer of the socket fd from
// the kernel (SO_PEERCRED, SO_PEERGROUPS).
func OfFD(fd int) (Cred, error) {
	uc, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return Cred{}, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	cred := Cred{UID: uc.Uid, GID: uc.Gid, PID: int(uc.Pid)}
	var gerr error
	cred.Groups, gerr = peerGroups(fd)
	if errors.Is(gerr, unix.ENOPROTOOPT) {
		// A kernel older than 4.13 has no SO_PEERGROUPS: /proc is all
		// there is, and a pid recycled meanwhile could lie.
		cred.Groups = supplementaryGroups(int(uc.Pid))
	} else if gerr != nil {
		return Cred{}, fmt.Errorf("SO_PEERGROUPS: %w", gerr)
	}
	return cred, nil
}

// peerGroups returns the supplementary groups that the peer of the socket
// fd had when it connected (SO_PEERGROUPS): the kernel's record, taken
// with the credentials, immune to the pid being recycled before the
// daemon looks.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 32)
	for {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case e == 0:
			return buf[: n/4 : n/4], nil
		case e == unix.ERANGE && int(n/4) > len(buf) && n/4 <= 65536:
			buf = make([]uint32, n/4) // n is what the groups need
		default:
			return nil, e
		}
	}
}

// supplementaryGroups reads a process's groups from /proc, for kernels
// without SO_PEERGROUPS. A process that has gone, or a host without
// /proc, yields none: the kernel's own check would then see only the
// primary group.
func supplementaryGroups(pid int) []uint32 {
	if pid <= 0 {
		return nil
	}
	b, err := procfs.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		var out []uint32
		for _, field := range strings.Fields(line) {
			if g, err := strconv.ParseUint(field, 10, 32); err == nil {
				out = append(out, uint32(g))
			}
		}
		return out
	}
	return nil
}
